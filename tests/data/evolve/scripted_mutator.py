"""A scripted headless mutator for the evolve tests (the --mutator-cmd contract, no model).

Reads the brief on stdin, takes the parent source from its "## Parent source (program A)" block,
changes one #define chosen from the question (a fixed one for the plain and none arms) and prints the
child on stdout, fenced, with some chatter around it (as a model would). SCRIPTED_MODE=fail|empty|sleep
misbehaves on purpose; SCRIPTED_LOG, when set, gets one JSON line per call (env, timing, stdin hash).
"""

import hashlib
import json
import os
import re
import sys
import time

brief = sys.stdin.read()
start = time.time()
mode = os.environ.get("SCRIPTED_MODE", "ok")
if mode == "sleep":
    time.sleep(float(os.environ.get("SCRIPTED_SLEEP", "30")))
elif mode == "pause":
    time.sleep(1.0)
log = os.environ.get("SCRIPTED_LOG")
if log:
    with open(log, "a") as fh:
        fh.write(json.dumps({"ticket": os.environ.get("ATTNQ_EVOLVE_TICKET"), "arm": os.environ.get("ATTNQ_EVOLVE_ARM"),
                             "question_id": os.environ.get("ATTNQ_EVOLVE_QUESTION_ID"),
                             "brief_file": os.environ.get("ATTNQ_EVOLVE_BRIEF"), "pid": os.getpid(),
                             "stdin_sha256": hashlib.sha256(brief.encode()).hexdigest(), "start": start,
                             "end": time.time(), "has_question": "## Question (" in brief,
                             "has_plain": "Make it faster." in brief}) + "\n")
if mode == "fail":
    print("mutator: the model is unavailable", file=sys.stderr)
    sys.exit(3)
if mode == "empty":
    sys.exit(0)
parent = re.search(r"## Parent source \(program A\)\n\n```cuda\n(.*?)\n```", brief, re.DOTALL).group(1)
question = os.environ.get("ATTNQ_EVOLVE_QUESTION_ID") or os.environ.get("ATTNQ_EVOLVE_ARM", "")
knob = ("TILE", "UNROLL", "BLOCK")[int(hashlib.sha256(question.encode()).hexdigest(), 16) % 3]
step = {"TILE": lambda v: v * 4 if v < 16384 else 1024, "UNROLL": lambda v: 4 if v != 4 else 1,
        "BLOCK": lambda v: 256 if v != 256 else 64}[knob]
child = re.sub(rf"#define {knob} (\d+)", lambda m: f"#define {knob} {step(int(m.group(1)))}", parent, count=1)
print(f"Answering {question}: I change {knob}.\n\n```cuda\n{child}\n```\nDone.")
