#!/bin/bash
# Build the virtual environment benchmarks/vllm_v1_frontend/run.py drives: vLLM 0.19.0 (the
# released wheel, from PyPI; a vLLM V1 of spring 2026, the era of the `scicom_vllm` runs) with its
# API server's libraries, over this machine's CPU-only torch. Nothing here needs a GPU: the
# compiled CUDA extensions are removed, the package's version is marked "+cpu" so vLLM picks its
# CPU platform, and the executor is replaced by fake_executor.py at run time.
#
#     bash benchmarks/vllm_v1_frontend/setup.sh [DIR]      # default /tmp/krakenlm-vllm-v1
set -euo pipefail
DIR=${1:-/tmp/krakenlm-vllm-v1}
V=0.19.0
ENV="$DIR/vllm-$V"
mkdir -p "$DIR/wheels"
if [ -x "$ENV/bin/python" ] && "$ENV/bin/python" -c "import vllm.entrypoints.openai.api_server" 2>/dev/null; then
  echo "$ENV: vLLM $V ready"; exit 0
fi
TORCH=$(ls /opt/wheels/torch-*.whl 2>/dev/null | head -1 || true)
TORCH=${TORCH:-torch}
python3 -m venv "$ENV"
"$ENV/bin/python" -m pip install -q "$TORCH" numpy regex cachetools psutil sentencepiece \
  "requests>=2.26" tqdm blake3 py-cpuinfo "transformers>=4.56,<5" "tokenizers>=0.21.1" protobuf \
  "fastapi[standard]>=0.115" "aiohttp>=3.13.3" "openai>=2" "pydantic>=2.12" prometheus_client \
  "prometheus-fastapi-instrumentator>=7" pillow tiktoken "lm-format-enforcer==0.11.3" \
  partial-json-parser pyzmq msgspec "gguf>=0.17" pyyaml einops cloudpickle watchfiles \
  python-json-logger pybase64 cbor2 ijson setproctitle "openai-harmony>=0.0.3" diskcache lark \
  filelock "outlines_core==0.2.11" "mistral_common>=1.10" "xgrammar>=0.1.32,<1" \
  "llguidance>=1.3,<1.4" "compressed-tensors==0.14.0.1" depyf anthropic \
  "model-hosting-container-standards>=0.1.13,<1" opentelemetry-sdk opentelemetry-api \
  "opentelemetry-semantic-conventions-ai>=0.4.1"
"$ENV/bin/python" -m pip download -q --no-deps -d "$DIR/wheels" "vllm==$V"
"$ENV/bin/python" -m pip install -q --no-deps "$DIR"/wheels/vllm-$V-*.whl
SITE=$("$ENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
find "$SITE/vllm" -name "*.so" -delete   # the CUDA kernels
# vLLM picks its CPU platform for a "+cpu" build (vllm/platforms/__init__.py cpu_platform_plugin)
sed -i "s/^Version: $V\$/Version: $V+cpu/" "$SITE/vllm-$V.dist-info/METADATA"
"$ENV/bin/python" -c "import vllm.entrypoints.openai.api_server" 2>/dev/null
echo "$ENV: vLLM $V ready"
