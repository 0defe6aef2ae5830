# Sourced by scripts/gpu_run.sh and scripts/kernel_dev.sh from the repository root: installs the wheels the
# GPU box lacks (.whl/, from ../shared/gpu/fetch-wheels.sh) to /tmp/site, unpacks FlashAttention-3 (.fa3/*.tgz,
# the `fa3` anchor) to /tmp/fa3, and puts both and the checkout on PYTHONPATH (checkout first). Each is done
# once per box (a stamp file), so that scripts sourcing this in parallel do not install over each other.
if ls .whl/*.whl >/dev/null 2>&1; then
  if [ ! -f /tmp/site/.attnq-installed ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && touch /tmp/site/.attnq-installed
  fi
  [ -f /tmp/site/.attnq-installed ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ls .fa3/*.tgz >/dev/null 2>&1; then
  if [ ! -f /tmp/fa3/.attnq-unpacked ]; then
    mkdir -p /tmp/fa3 && for t in .fa3/*.tgz; do tar xzf "$t" -C /tmp/fa3; done && touch /tmp/fa3/.attnq-unpacked
  fi
  [ -f /tmp/fa3/.attnq-unpacked ] && export PYTHONPATH=/tmp/fa3${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
