#!/usr/bin/env bash
# chat.sh — `phi4mm chat` on the tiny fixture model:
#  - each answer of a conversation (text turns, then an image attached with /image, then an audio
#    clip) is what `generate --raw` gives for the whole conversation so far rendered with the chat
#    template, byte for byte;
#  - from the second turn on the prompt cache holds the history up to its last <|end|> (--stats),
#    but for the turn that brings the first image (the vision adapter changes every K/V);
#    --no-prompt-cache gives the same answers;
#  - a message of several lines (between lines that begin and end with three double quotes) is
#    those lines joined by newlines; a block the input leaves open is named and not sent;
#  - a missing file, an unknown command, a message that is not UTF-8 and an empty input are handled: a message naming them, the
#    conversation goes on, the exit status says a line failed.
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model
I=$FIX/phi4mm-tiny/inputs

$PY - "$BIN" "$M" "$I" <<'EOF'
import re, subprocess, sys
binary, model, inputs = sys.argv[1:4]
system = ("You are a careful assistant. Answer in one short sentence, plainly, without lists, without "
          "code and without asking questions back; say so when you do not know, and never invent facts or sources. "
          "Keep to the question asked, use the units the user uses, and prefer common names to technical ones.")
turns = [("text", "What is the capital of France?"), ("text", "And of Italy?"),
         ("image", "Describe the image."), ("audio", "Transcribe the clip.")]
lines = []
for kind, text in turns:
    if kind == "image":
        lines.append("/image %s/image.png" % inputs)
    if kind == "audio":
        lines.append("/audio %s/clip_a_16k.wav" % inputs)
    lines.append(text)
stdin = ("\n".join(lines) + "\n").encode()

def run(args, data=None):
    p = subprocess.run([binary] + args, input=data, capture_output=True, timeout=600)
    return p.returncode, p.stdout, p.stderr

rc, out, err = run(["chat", "-m", model, "-n", "8", "--stats", "--system", system], stdin)
rc2, out2, _ = run(["chat", "-m", model, "-n", "8", "--no-prompt-cache", "--system", system], stdin)

# the same conversation, a turn at a time, through generate --raw
history, want, images, audios = "<|system|>%s<|end|>" % system, b"", [], []
for kind, text in turns:
    user = text
    if kind == "image":
        images.append("%s/image.png" % inputs)
        user = "<|image_%d|>" % len(images) + user
    if kind == "audio":
        audios.append("%s/clip_a_16k.wav" % inputs)
        user = "<|audio_%d|>" % len(audios) + user
    prompt = history + "<|user|>%s<|end|><|assistant|>" % user
    args = ["generate", "-m", model, "-n", "8", "--raw", "-p", prompt]
    for f in images:
        args += ["--image", f]
    for f in audios:
        args += ["--audio", f]
    g, answer, gerr = run(args)
    if g != 0:
        print("FAIL chat_generate_reference: %s" % gerr.decode(errors="replace")[-300:])
        sys.exit(0)
    want += answer
    history = prompt + answer[:-1].decode("utf-8", "surrogateescape") + "<|end|>"

stats = [tuple(map(int, m)) for m in re.findall(rb"\[(\d+) prompt tokens, (\d+) from the prompt cache", err)]
ok = rc == 0 and out == want
print(("PASS" if ok else "FAIL") + " chat_answers_equal_generate" + ("" if ok else ": rc %d, %r vs %r; %s" % (rc, out[:200], want[:200], err[-300:])))
ok = rc2 == 0 and out2 == want
print(("PASS" if ok else "FAIL") + " chat_without_prompt_cache_same")
# turn 1: nothing cached; turn 2: the history up to its last <|end|> (all of the previous prompt but
# <|assistant|>); turn 3, the first with an image, runs the vision adapter: nothing of the text
# turns' K/V applies; turn 4 (image and clip: the vision adapter too) finds turn 3's
ok = len(stats) == 4 and stats[0][1] == 0 and stats[1][1] == stats[0][0] - 1 and stats[2][1] == 0 and stats[3][1] == stats[2][0] - 1
print(("PASS" if ok else "FAIL") + " chat_prompt_cache_holds_history" + ("" if ok else ": %s" % stats))

bad = ("Hi\n/image %s/missing.png\n/frobnicate\n\nAgain\n" % inputs).encode()
rc3, out3, err3 = run(["chat", "-m", model, "-n", "3"], bad)
e = err3.decode(errors="replace")
ok = rc3 == 1 and "missing.png" in e and "unknown command '/frobnicate'" in e and out3.count(b"\n") >= 2
print(("PASS" if ok else "FAIL") + " chat_bad_lines_named_and_survived" + ("" if ok else ": rc %d %r %r" % (rc3, out3, e[-300:])))
rc4, out4, err4 = run(["chat", "-m", model], b"")
print(("PASS" if rc4 == 0 and out4 == b"" else "FAIL") + " chat_empty_input")
# a message of several lines between lines that begin and end with three double quotes: the same
# answers as generate gives for those lines joined by newlines; one left open is named, not sent
block = b'"""Line one\n  line two\n"""\n"""single"""\n'
rc6, out6, err6 = run(["chat", "-m", model, "-n", "6"], block)
want6 = b""
for user in ["Line one\n  line two", "single"]:
    g, answer, _ = run(["generate", "-m", model, "-n", "6", "--raw", "-p", "%s<|user|>%s<|end|><|assistant|>" % (prev if want6 else "", user)])
    prev = "<|user|>%s<|end|><|assistant|>%s<|end|>" % (user, answer[:-1].decode("utf-8", "surrogateescape"))
    want6 += answer
ok = rc6 == 0 and out6 == want6
print(("PASS" if ok else "FAIL") + " chat_multiline_message" + ("" if ok else ": rc %d %r vs %r %r" % (rc6, out6, want6, err6[-300:])))
rc7, out7, err7 = run(["chat", "-m", model, "-n", "3"], b'"""never\nclosed\n')
ok = rc7 == 1 and out7 == b"" and b"ended inside" in err7
print(("PASS" if ok else "FAIL") + " chat_open_block_named_not_sent" + ("" if ok else ": rc %d %r %r" % (rc7, out7, err7[-300:])))
# a message that is not UTF-8 is named and not sent, and the image attached for it goes with it:
# the next message is answered as text alone (generate's answer)
rc8, out8, err8 = run(["chat", "-m", model, "-n", "4"], ("/image %s/image.png\n" % inputs).encode() + b"\xe9t\xe9\nHello\n")
g, want8, _ = run(["generate", "-m", model, "-n", "4", "-p", "Hello"])
ok = rc8 == 1 and out8 == want8 and b"not UTF-8 text (byte 0" in err8
print(("PASS" if ok else "FAIL") + " chat_non_utf8_message_named_not_sent" + ("" if ok else ": rc %d %r vs %r %r" % (rc8, out8, want8, err8[-300:])))
rc5, _, err5 = run(["chat", "-m", model, "--bogus"], b"")
print(("PASS" if rc5 != 0 and b"--bogus" in err5 else "FAIL") + " chat_unknown_option_refused")
EOF
