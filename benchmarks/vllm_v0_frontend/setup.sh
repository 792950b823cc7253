#!/bin/bash
# Build the two virtual environments benchmarks/vllm_v0_frontend/run.py drives: vLLM 0.5.4 and
# 0.6.0 (the released wheels, from PyPI) with the front-end libraries of their time, over this
# machine's CPU-only torch. Nothing here needs a GPU: the compiled CUDA extensions are removed
# and vLLM falls back to its pure-Python stand-ins; the executor is replaced by
# fake_executor.py at run time.
#
#     bash benchmarks/vllm_v0_frontend/setup.sh [DIR]      # default /tmp/krakenlm-vllm-v0
set -euo pipefail
DIR=${1:-/tmp/krakenlm-vllm-v0}
mkdir -p "$DIR/wheels"
TORCH=$(ls /opt/wheels/torch-*.whl 2>/dev/null | head -1 || true)
TORCH=${TORCH:-torch}
for V in 0.5.4 0.6.0; do
  ENV="$DIR/vllm-$V"
  [ -x "$ENV/bin/python" ] && "$ENV/bin/python" -c "import vllm" 2>/dev/null && continue
  python3 -m venv "$ENV"
  "$ENV/bin/python" -m pip install -q "$TORCH" "numpy<2" fastapi==0.112.2 "uvicorn[standard]==0.30.6" \
    pydantic==2.8.2 transformers==4.44.2 tokenizers==0.19.1 "huggingface-hub<0.26" pyzmq==26.2.0 \
    aiohttp==3.10.5 msgspec prometheus-client prometheus-fastapi-instrumentator==7.0.0 psutil \
    sentencepiece py-cpuinfo "openai<1.50" pillow tiktoken partial-json-parser gguf==0.9.1 \
    mistral-common==1.3.4 pyyaml cloudpickle uvloop requests tqdm protobuf filelock \
    importlib-metadata typing-extensions outlines==0.0.46 "pyarrow<18" "datasets<3.1" pycountry
  if [ "$V" = 0.5.4 ]; then ENFORCER=0.10.3; else ENFORCER=0.10.6; fi
  "$ENV/bin/python" -m pip download -q --no-deps -d "$DIR/wheels" "vllm==$V"
  "$ENV/bin/python" -m pip install -q --no-deps "$DIR"/wheels/vllm-$V-*.whl "lm-format-enforcer==$ENFORCER"
  SITE=$("$ENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  rm -f "$SITE"/vllm/*.so   # the CUDA kernels: vLLM imports its pure-Python fallbacks instead
  # outlines imports pyairports, whose only PyPI release (0.0.1) ships no module: a one-entry stand-in
  mkdir -p "$SITE/pyairports"
  : > "$SITE/pyairports/__init__.py"
  echo 'AIRPORT_LIST = [("Nowhere", "Nowhere", "XX", "XXX")]' > "$SITE/pyairports/airports.py"
  "$ENV/bin/python" -c "import vllm.entrypoints.openai.api_server" 2>/dev/null
  echo "$ENV: vLLM $V ready"
done
