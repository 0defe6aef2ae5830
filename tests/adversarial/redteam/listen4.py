from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
import os
import socket
import subprocess
import sys

p = "/tmp/redteam/outside.sock"
if os.path.exists(p): os.unlink(p)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(p); s.settimeout(0.5)
r = subprocess.run([sys.executable, str(Path(__file__).with_name("drive.py")), "/tmp/redteam/rt4.so", "--shape", "2,20,24,4,2,16,1"],
                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
print([l for l in r.stderr.splitlines() if "RT4" in l]); print("\n".join(l for l in r.stdout.splitlines() if '"correct' in l or '"check' in l or '"message' in l))
try: print("LISTENER GOT:", s.recv(200))
except TimeoutError: print("listener got nothing")
