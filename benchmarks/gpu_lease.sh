#!/usr/bin/env bash
# The prepared GPU check of issue 12, for a lent GPU machine whose image has Python 3.12, numpy, onnx
# and torch but neither onnxruntime-gpu nor PyAV. Run from the repository root with $OUT set (the
# device tool sets it), once the wheels' pieces are in .lease/ (carried over warm calls; see
# docs/benchmarks.md, "GPU"): ort.whl.part.* (the onnxruntime-gpu wheel, split) and, optionally,
# av.whl.part.* (PyAV's). About 6 minutes (at most 520 s of steps); each step has its own timeout so a hung step leaves the
# others' figures, and every log lands in $OUT. `gpu_lease.sh streams` runs only the whole service's
# live streams bench instead (about 4 minutes: 16-64 cameras in one process, then 64 over four), which
# also needs PyAV and deps.tar.part.* (the service's other dependencies' wheels, tarred and split).
set -u
: "${OUT:?set OUT to the folder whose files come back}"
site=/tmp/site pieces=/tmp/lease
mkdir -p "$site" "$pieces"
cp .lease/* "$pieces"/ 2> /dev/null  # this call's piece; earlier calls left theirs in /tmp/lease
for wheel in ort av; do
    if compgen -G "$pieces/$wheel.whl.part.*" > /dev/null; then
        cat "$pieces/$wheel".whl.part.* > "/tmp/$wheel.whl"
        python3 -m zipfile -e "/tmp/$wheel.whl" "$site" || echo "unpacking $wheel failed"
    fi
done
if compgen -G "$pieces/deps.tar.part.*" > /dev/null; then  # wheels of pydantic, aiohttp, aiortc, ...
    mkdir -p /tmp/deps && cat "$pieces"/deps.tar.part.* | tar -x -C /tmp/deps
    for wheel in /tmp/deps/*.whl; do python3 -m zipfile -e "$wheel" "$site" || echo "unpacking $wheel failed"; done
fi
export PYTHONPATH="$site" PYTHONUNBUFFERED=1
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
ls /usr/lib/x86_64-linux-gnu/ | grep -E 'libnvcuvid|libnvidia-encode|libnvinfer' || echo "no NVDEC/NVENC/TensorRT libraries mounted"

step() {  # name, seconds, command...
    local name=$1 seconds=$2
    shift 2
    timeout "$seconds" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name: rc $?"
    grep -v constant_folding "$OUT/$name.log" | tail -40
}

if [ "${1:-}" = streams ]; then
    # The whole service: live 1080p30 cameras (decode, model batched across them, encode), 16 to 64.
    step streams 280 python3 -m streamer.bench streams --streams 16,32,64 --size 1920x1080 --fps 30 \
        --seconds 15 --warmup-s 10 --json "$OUT/streams.json" --markdown "$OUT/streams.md"
    # The same 64 cameras split over 4 services, each in a process of its own with its own event loop
    # (one loop spends about a millisecond of CPU per frame: 64 x 30 frames a second may saturate it).
    step streams4 120 python3 -m streamer.bench streams --streams 64 --processes 4 --size 1920x1080 \
        --fps 30 --seconds 15 --warmup-s 10 --json "$OUT/streams4.json" --markdown "$OUT/streams4.md"
    exit 0
fi

# 1. The default model: kept, page-locked buffers (frames) against fresh ones (frames_fresh), and
#    frames up and down as 4:2:0 planes (frames_yuv), batched; the caller sleeping while the GPU works.
step gpu 180 python3 -m streamer.bench gpu --providers TensorrtExecutionProvider,CUDAExecutionProvider \
    --precisions fp16 --io uint8 --sizes 1280x720,1920x1080 --batches 1,8,16 --seconds 1 --budget-s 150 \
    --json "$OUT/gpu.json" --markdown "$OUT/gpu.md"
# 1b. The same at 720p with the caller spinning (CUDA's default before model.gpu_wait): its CPU ms per
#     frame against step 1's.
step spin 60 python3 -m streamer.bench gpu --providers CUDAExecutionProvider --precisions fp16 --io uint8 \
    --sizes 1280x720 --batches 1,16 --seconds 1 --budget-s 40 --gpu-wait spin \
    --json "$OUT/spin.json" --markdown "$OUT/spin.md"
# 2. The ConvLSTM: its state kept on the device (frames) against sent both ways (host).
step recurrent 100 python3 -m streamer.bench gpu --model streamer/assets/convlstm_strength.onnx \
    --providers CUDAExecutionProvider --precisions fp16 --io uint8 --sizes 1920x1080 --batches 1,4 \
    --seconds 1 --budget-s 80 --json "$OUT/recurrent.json" --markdown "$OUT/recurrent.md"
# 3. Decode and encode: NVDEC and NVENC against the host's cores (needs PyAV).
if python3 -c "import av" 2> /dev/null; then
    step codecs 60 python3 -m streamer.bench codecs --sizes 1920x1080 --seconds 3 \
        --json "$OUT/codecs.json" --markdown "$OUT/codecs.md"
else
    echo "== codecs: skipped, no PyAV (carry av.part.*)"
fi
# 4. onnxruntime's own kernel table beside torch's best.
step reference 120 python3 -m export.gpu_reference --sizes 1280x720 --batches 8 --dtypes fp16 \
    --layouts nhwc --seconds 0.5 --profile 1280x720:8:fp16:nhwc --onnxruntime 1280x720:8
