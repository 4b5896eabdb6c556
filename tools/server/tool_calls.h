/* tool_calls.h — OpenAI function calling (chat "tools") over Phi-4-multimodal's chat template.
 *
 * What the checkpoint documents is the input side: its chat template (tokenizer_config.json)
 * renders a system message that carries tools as <|system|>content<|tool|>TOOLS<|/tool|><|end|>,
 * and every other message, a "tool" one included, as <|role|>content<|end|>. TOOLS here is the
 * JSON list of the request's functions ({"name", "description", "parameters"}, as the Phi-4-mini
 * model card shows it), on the first system message (one with empty content is put first when the
 * conversation has none). How the model writes a call is not documented by the official code;
 * runtimes read it either between its <|tool_call|> and <|/tool_call|> tokens (llama.cpp) or after
 * a leading "functools" (vLLM's phi4_mini_json). So:
 *   - tool_choice "required" or a named function: the answer is held (JSON mode, json_schema.h)
 *     to a list of calls [{"name": ..., "arguments": {...}}], each call's arguments to its
 *     function's parameters schema (a union of the functions' calls told apart by the name), and
 *     comes back as tool_calls, whatever the model would have written on its own;
 *   - "auto" (the default with tools): the answer is free; calls written in either form above
 *     (a list of such objects, or one) come back as tool_calls, the text before them as content;
 *     anything else is content, as it was written. Once the model writes <|tool_call|> itself,
 *     what follows is held (lazy JSON mode, pm_request.json_lazy) to a list of calls or one call
 *     of the functions, and <|/tool_call|> or the end token then ends the answer; when a
 *     function's parameters use a keyword the mask cannot hold, the calls are only read;
 *   - "none": no tools in the prompt, a plain answer.
 * An assistant message's tool_calls go back into the prompt as <|tool_call|>[calls]<|/tool_call|>
 * after its content. */
#ifndef PM_SRV_TOOL_CALLS_H
#define PM_SRV_TOOL_CALLS_H

#include <jansson.h>
#include <stddef.h>

#include "call_reader.h"
#include "server.h"

typedef enum { SRV_TOOLS_OFF = 0, SRV_TOOLS_AUTO = 1, SRV_TOOLS_FORCED = 2 } srv_tool_mode;
enum { SRV_MAX_TOOLS = 128, SRV_MAX_TOOL_NAME = SRV_CALL_NAME_MAX };

/* Reads a chat body's tools, tool_choice and parallel_tool_calls. On success (0): *mode,
 * *tools_text (malloc'd JSON list for the system message; NULL when the mode is off), and *schema
 * (malloc'd JSON Schema text, checked to compile): with a forced choice the one the answer is held
 * to, with auto the one what follows the model's <|tool_call|> is held to (NULL when it does not
 * compile: then auto only reads). -1 with e set (400 naming the field) on a mistake. */
int srv_tools_parse(const json_t *root, srv_tool_mode *mode, char **tools_text, char **schema, srv_error *e);

/* An assistant message's tool_calls (OpenAI's array, param names it for errors) as prompt text:
 * <|tool_call|>[{"name": ..., "arguments": ...}, ...]<|/tool_call|>. *out malloc'd. */
int srv_tool_calls_render(const json_t *calls, const char *param, char **out, srv_error *e);

/* Where the calls sit in a generated text. marker_at / marker_end: the text offsets at which the
 * <|tool_call|> / <|/tool_call|> tokens came (SIZE_MAX: did not). Returns the OpenAI tool_calls
 * array (ids "call_<id>_<index>_<k>", arguments as JSON text) and the length of the content
 * before them in *content_len; NULL when the text holds no calls (then *content_len = len).
 * Arguments written as an object are the model's text without the whitespace outside strings
 * (call_reader.h), as a stream sends them. */
json_t *srv_tool_calls_find(const char *text, size_t len, srv_tool_mode mode, size_t marker_at, size_t marker_end,
                            const char *id, int index, size_t *content_len);

/* The id of choice index's call k in response id: "call_<hex of id>_<index>_<k>". */
void srv_tool_call_id(char *out, size_t size, const char *id, int index, size_t k);

/* While an auto-mode answer streams: how many bytes of text[0..len) may go out as content now
 * (the rest may still turn out to be a call). */
size_t srv_tool_content_ready(const char *text, size_t len, size_t marker_at);

#endif
