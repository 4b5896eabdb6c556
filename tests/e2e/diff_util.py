"""diff_util.py — what the differential tests (regex_diff.py, lark_diff.py) share: a test driver
(tests/tools/*_driver.c) spoken to a line at a time, and small mutations of a text."""
import subprocess


def driver(path):
    """The driver's process and ask(kind, text): sends "KIND <hex of text>", returns its answer line."""
    drv = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(kind, text):
        drv.stdin.write("%s %s\n" % (kind, text.encode("utf-8").hex()))
        drv.stdin.flush()
        return drv.stdout.readline().strip()
    return drv, ask


def mutate(r, s, alpha):
    """s with one or two characters inserted (from alpha), deleted or replaced."""
    s = list(s)
    for _ in range(r.randint(1, 2)):
        k = r.randrange(3)
        if k == 0 or not s:
            s.insert(r.randint(0, len(s)), r.choice(alpha))
        elif k == 1:
            del s[r.randrange(len(s))]
        else:
            s[r.randrange(len(s))] = r.choice(alpha)
    return "".join(s)
