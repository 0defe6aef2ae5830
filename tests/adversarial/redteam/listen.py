"""Runs a sandbox-escape red-team kernel (default /tmp/redteam/rt9.so; rt4.so is the plain-import version)
through drive.py with a unix datagram socket bound outside the sandbox, and says whether it received anything.

    .venv/bin/python tests/adversarial/redteam/listen.py [/tmp/redteam/rt4.so]
"""
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
lib = sys.argv[1] if len(sys.argv) > 1 else "/tmp/redteam/rt9.so"
p = "/tmp/redteam/outside.sock"
if os.path.exists(p):
    os.unlink(p)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(p)
s.settimeout(0.5)
r = subprocess.run([sys.executable, str(Path(__file__).with_name("drive.py")), lib, "--shape", "2,20,24,4,2,16,1"],
                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
print([ln for ln in r.stderr.splitlines() if "RT4" in ln])
print("\n".join(ln for ln in r.stdout.splitlines() if '"correct' in ln or '"check' in ln or '"message' in ln))
try:
    print("LISTENER GOT:", s.recv(200))
except TimeoutError:
    print("listener got nothing")
