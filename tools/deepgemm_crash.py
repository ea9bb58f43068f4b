"""A native crash that names itself: a fatal-signal handler in C, built and loaded before torch,
and its frames symbolized with ``nm`` (the GPU machine has no gdb)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def describe_exit(rc: int) -> str:
    """How a child process ended, in words: "killed by SIGSEGV", or "exit status 1"."""
    import signal

    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


#: A fatal-signal handler for the steps, built with the machine's C compiler when ``diagnose`` starts
#: (there is no gdb there) and loaded with ctypes before torch. It makes C ``stdout`` unbuffered, so
#: that the JIT's own ``printf`` lines (its code, nvcc command, cubin load) reach the pipe before a
#: crash instead of dying in the buffer, and on SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT writes the
#: faulting address, the instruction's object and offset, and glibc's ``backtrace`` of the native
#: stack; then it hands the signal to the handler it replaced (Python's faulthandler: the Python
#: stack), and the process dies of the same signal, so the exit status still says how.
CRASH_HANDLER_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static char alt_stack[1 << 16];  /* a stack overflow leaves no room on the thread's own stack */
static struct sigaction previous[65];

static void say(const char *text) { ssize_t rc = write(2, text, strlen(text)); (void)rc; }

static void where(const char *what, void *addr) {
    char line[768];
    Dl_info info;
    if (dladdr(addr, &info) && info.dli_fname)
        snprintf(line, sizeof line, "%s %p: %s(%s+0x%lx)\n", what, addr, info.dli_fname,
                 info.dli_sname ? info.dli_sname : "",
                 (unsigned long)((char *)addr - (char *)(info.dli_sname ? info.dli_saddr : info.dli_fbase)));
    else
        snprintf(line, sizeof line, "%s %p: in no loaded object\n", what, addr);
    say(line);
}

static void on_fatal(int sig, siginfo_t *info, void *context) {
    char line[256];
    void *frames[64];
    fflush(stdout);  /* not async-signal-safe, but the process is dying and these lines matter */
    snprintf(line, sizeof line, "\nDGCRASH signal %d (%s), fault address %p\n", sig, strsignal(sig), info->si_addr);
    say(line);
#if defined(__x86_64__)
    where("DGCRASH instruction", (void *)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP]);
#endif
    say("DGCRASH native stack, innermost first:\n");
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    say("DGCRASH end\n");
    sigaction(sig, &previous[sig], NULL);
    if (info->si_code <= 0)  /* sent by raise or kill: send it again, to the previous handler */
        raise(sig);
    /* a fault: returning runs the faulting instruction again, and the previous handler gets it */
}

int dg_diag_install(void) {
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    struct sigaction action;
    stack_t stack;
    void *warm[2];
    setvbuf(stdout, NULL, _IONBF, 0);
    stack.ss_sp = alt_stack;
    stack.ss_size = sizeof alt_stack;
    stack.ss_flags = 0;
    sigaltstack(&stack, NULL);
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fatal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; ++i)
        sigaction(sigs[i], &action, &previous[sigs[i]]);
    backtrace(warm, 2);  /* its first call loads libgcc_s (malloc, dlopen): do that now, not in the handler */
    return 0;
}
"""


def install_crash_handler() -> bool:
    """In a process started with ``DG_DIAG_CRASH_HANDLER`` naming a built ``crash_handler``: load it
    (``deepgemm_peer.py``'s probe child does, so that its crash, too, comes with a native stack)."""
    lib = os.environ.get("DG_DIAG_CRASH_HANDLER")
    if not lib or not Path(lib).exists():
        return False
    import ctypes

    ctypes.CDLL(lib).dg_diag_install()
    return True


def crash_handler(work: Path) -> tuple[Path | None, str]:
    """(path, compiler) of ``CRASH_HANDLER_C`` built as a shared library in ``work``, or (None, why)."""
    import shutil

    work.mkdir(parents=True, exist_ok=True)
    src, lib = work / "dg_diag_crash.c", work / "libdg_diag_crash.so"
    src.write_text(CRASH_HANDLER_C)
    tried = []
    for cc in dict.fromkeys(c for c in (os.environ.get("CC"), "cc", "gcc", os.environ.get("CXX"), "g++") if c):
        if not shutil.which(cc):
            continue
        proc = subprocess.run([cc, "-x", "c", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return lib, cc
        tried.append(f"{cc}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    return None, "; ".join(tried) or "no C compiler on PATH"


def symbolize(lines: list[str], dest: Path) -> list[str]:
    """The crash handler's frames, with names: a frame of the extension (or of any object under
    ``dest``) given as ``obj(+0xOFFSET)`` gets the nearest symbol below from ``nm`` (DeepGEMM's
    functions are ``static``, so they are only in the symbol table); mangled names demangled."""
    import bisect
    import shutil

    frame = re.compile(r"^(?P<obj>/\S+?)\((?P<sym>[^()+]*)\+0x(?P<off>[0-9a-f]+)\)")
    tables: dict[str, tuple[list[int], list[str]]] = {}
    out = []
    for line in lines:
        text = line.split(": ", 1)[1] if line.startswith("DGCRASH instruction") else line
        m = frame.match(text)
        if m and not m["sym"] and m["obj"].startswith(str(dest)) and shutil.which("nm"):
            if m["obj"] not in tables:
                addrs, names = [], []
                nm = subprocess.run(["nm", "-n", "-C", "--defined-only", m["obj"]], capture_output=True, text=True)
                for entry in nm.stdout.splitlines():
                    parts = entry.split(" ", 2)
                    if len(parts) == 3 and parts[1].lower() in "tw":
                        addrs.append(int(parts[0], 16))
                        names.append(parts[2])
                tables[m["obj"]] = (addrs, names)
            addrs, names = tables[m["obj"]]
            i = bisect.bisect_right(addrs, int(m["off"], 16)) - 1
            if i >= 0:
                line += f"  = {names[i][:200]}+0x{int(m['off'], 16) - addrs[i]:x}"
        elif m and m["sym"].startswith("_Z") and shutil.which("c++filt"):
            line += "  = " + subprocess.run(["c++filt", m["sym"]], capture_output=True, text=True).stdout.strip()[:200]
        out.append(line)
    return out
