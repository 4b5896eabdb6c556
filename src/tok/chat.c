/* chat.c — the Phi-4-mini chat template, hand-rendered (the template has one loop and one branch; see chat.h). */
#include "tok/chat.h"

#include <string.h>

#include "tok/utf8.h"

static int put(pm_buf *b, const char *s, pm_err *e) { return pm_buf_put(b, s, strlen(s), e); }

int pm_chat_render(const pm_chat_msg *msgs, int n, int end, char **out, pm_err *e) {
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return pm_errf(e, PM_EINVAL, "chat: bad message list");
    if (end < PM_CHAT_END_EOS || end > PM_CHAT_CONTINUE) return pm_errf(e, PM_EINVAL, "chat: unknown ending %d", end);
    if (end == PM_CHAT_CONTINUE && n == 0) return pm_errf(e, PM_EINVAL, "chat: no final message to continue");
    pm_buf b = {0};
    int rc = PM_OK;
    for (int i = 0; i < n && !rc; i++) {
        const pm_chat_msg *m = &msgs[i];
        if (!m->role || !m->content) {
            rc = pm_errf(e, PM_EINVAL, "chat: message %d has no %s", i, m->role ? "content" : "role");
            break;
        }
        rc = put(&b, "<|", e);
        if (!rc) rc = put(&b, m->role, e);
        if (!rc) rc = put(&b, "|>", e);
        if (!rc) rc = put(&b, m->content, e);
        if (end == PM_CHAT_CONTINUE && i == n - 1) break; /* left open */
        if (!rc && !strcmp(m->role, "system") && m->tools) {
            rc = put(&b, "<|tool|>", e);
            if (!rc) rc = put(&b, m->tools, e);
            if (!rc) rc = put(&b, "<|/tool|>", e);
        }
        if (!rc) rc = put(&b, "<|end|>", e);
    }
    if (!rc && end != PM_CHAT_CONTINUE) rc = put(&b, end == PM_CHAT_GENERATE ? "<|assistant|>" : "<|endoftext|>", e);
    if (!rc) rc = pm_buf_take(&b, out, NULL, e);
    pm_buf_free(&b);
    return rc;
}
