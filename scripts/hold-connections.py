#!/usr/bin/env python3
# Holds N keep-alive connections to a controller (each makes one GET /healthz),
# then times requests on a fresh connection and one more request on each held
# one; reports the controller's threads, descriptors and RSS (docs/BENCHMARKS.md,
# "Issue 25: liveness"). Usage: [CA=DB.ca.pem] hold-connections.py PORT PID N [N2 ...]
# (CA set: TLS, trusting that CA).
import resource, socket, sys, time, os
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
port, pid = int(sys.argv[1]), int(sys.argv[2])
REQ = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"

import ssl
CA = os.environ.get("CA")
ctx = None
if CA:
    ctx = ssl.create_default_context(cafile=CA); ctx.check_hostname = False
def connect(timeout=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(s) if ctx else s

def read_resp(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d: raise IOError("closed")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = 0
    for l in head.split(b"\r\n"):
        if l.lower().startswith(b"content-length:"): n = int(l.split(b":")[1])
    while len(rest) < n:
        rest += s.recv(65536)

def status():
    st = open(f"/proc/{pid}/status").read()
    th = [l for l in st.splitlines() if l.startswith("Threads:")][0].split()[1]
    rss = int([l for l in st.splitlines() if l.startswith("VmRSS:")][0].split()[1]) // 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return f"threads {th}, fds {fds}, RSS {rss} MiB"

def probe(k=200):
    try:
        s = connect()
    except Exception as e:
        return f"a new connection fails: {e.__class__.__name__}"
    lat = []
    for _ in range(k):
        t = time.perf_counter(); s.sendall(REQ); read_resp(s); lat.append((time.perf_counter() - t) * 1e3)
    s.close()
    lat.sort()
    return f"p50 {lat[len(lat)//2]:.2f} ms p99 {lat[int(len(lat)*0.99)]:.2f} ms"

held = []
print(f"0 held: {status()}; fresh connection, {probe()}", flush=True)
for target in map(int, sys.argv[3:]):
    t = time.time(); fails = 0
    while len(held) < target:
        try:
            s = connect(10)
            s.sendall(REQ); read_resp(s); held.append(s)
        except Exception as e:
            fails += 1
            if fails > 20: print("giving up:", e); break
    opened = time.time() - t
    time.sleep(1)
    # every held connection still answers?
    t = time.time(); ok = 0
    for s in held:
        try: s.sendall(REQ); read_resp(s); ok += 1
        except Exception: pass
    again = time.time() - t
    print(f"{len(held)} held (opened in {opened:.1f} s): {status()}; fresh connection, {probe()}; "
          f"one more request on each held: {ok} answered in {again:.1f} s", flush=True)
for s in held: s.close()
time.sleep(6)
print(f"closed: {status()}", flush=True)
