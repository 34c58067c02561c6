#!/usr/bin/env bash
# One device call on the H200 machine: build tr there, then run the stages named on the command line, each
# stage's log under $OUT, a short summary last (only the end of a call's output comes back).
#
#   bash benchmarks/h200_session.sh build gputests profile          # call 1 (carry: .whl)
#   bash benchmarks/h200_session.sh bench                           # call 2 (rebuilds only what changed)
#
# The whole GPU suite in calls that fit (tools/gpu_suite.py; a summary naming every failure, cut test and test not
# run, printed last and written under $OUT). On one warm machine, call after call:
#   bash benchmarks/h200_session.sh build gpusuite                              # call 1 (carry: .whl, .devdata)
#   GPUSUITE_ARGS=--resume bash benchmarks/h200_session.sh gpusuite              # calls 2, 3...: what is left
#   GPUSUITE_ARGS="--rerun-failed all" bash benchmarks/h200_session.sh gpusuite  # the round's failures again
# (the printed summary ends with the round so far: every test's last outcome over this tree's calls). Across
# machines, shards balanced by benchmarks/gpu_durations.json, the same in every call of a round:
#   GPU_SHARD=1/3 bash benchmarks/h200_session.sh build gpusuite                # then 2/3, 3/3
# then, on the development machine: python tools/gpu_suite.py --merge-durations <files_at>/gpu_suite_durations.json
#
# Stages (in the order given; default: build gputests profile bench):
#   build              wheels of .whl the machine lacks -> $SITE, then tr-core tensor algo graph task (hatchling)
#                      and the native tr-data and tr-backend (TR_BACKEND_CUDA=ON, TR_CUDA_ARCHS=90, cuDNN
#                      frontend required) built as wheels and installed into $SITE with one pip --target
#                      (one install: pip --target replaces a whole top-level folder, and all of them share tr/).
#                      CMake build folders persist under build/device/ (gitignored: kept on a warm machine).
#   gputests           pytest -m gpu packages tests-integration
#   gpusuite           tools/gpu_suite.py: GPU_SHARD (K/N, K1,K2/N, all/N or all; default all) of the GPU tests of
#                      GPUSUITE_PATHS (packages tests-integration), GPUSUITE_ARGS (e.g. "--resume", "--rerun-failed
#                      all --with-not-run", "--test-timeout 120"), within the stage's limit (TR_GPUSUITE_LIMIT_S,
#                      540); its events and each call's summary kept in build/device/gpusuite (a warm machine keeps
#                      them); files gpu_suite_summary.json, gpu_suite_failures.txt, gpu_suite_durations.json,
#                      gpusuite.log
#   profile[-MODEL]    benchmarks/step_profile.py, MODEL vgg16_bn | resnet50 | mobilenet_v2 | efficientnet_b0 |
#                      mlp_mnist (profile: the first two)
#   bench[-MODEL]      benchmarks/cnn.py --json auto, MODEL vgg16_bn | resnet50 | mobilenet_v2 | efficientnet_b0
#                      (bench: the first two)
#   trace[-MODEL]      benchmarks/kernel_trace.py: every kernel of the real step (CUPTI), MODEL as for profile
#   build-data         tr-core and the native tr-data only (enough for the pipeline stages)
#   datatests          pytest packages/tr-data (the JPEG tests need libjpeg-turbo: see below)
#   pipeline           = scaling loaders
#   scaling[-imagenet] benchmarks/pipeline_scaling.py: worker scaling of the MNIST and ImageNet chains (claimed and
#                      static assignment), or of the ImageNet chain only (claimed)
#   loaders            benchmarks/imagenet_pipeline.py: tr vs torchvision ImageFolder+DataLoader, 1 and all cores
#                      (LOADERS_AB=N: also N interleaved window/whole-decode runs)
#   loaders-vs         the same, only LOADERS_VS (default 7) interleaved one-worker rounds: tr folder, tr DTS pack
#                      made with --baseline, torchvision
#   e2e[-LEVEL]        benchmarks/imagenet_train.py: ResNet-50 from a DTS pack at LEVEL (default 0) vs its step
#   jpegtests          the JPEG-on-the-device GPU tests (issue [13]): test_cuda_image.py, test_gpu_jpeg_decode.py,
#                      test_gpu_jpeg_feeder.py
#   devdecode          benchmarks/imagenet_pipeline.py --device cuda (benchmarks/device_decode.py): decoded + augmented
#                      images/s of tr's device decode (folder, DTS, DTS baseline), torchvision's nvJPEG, DALI (where
#                      dali-unpack ran), tr's CPU pipeline
#   dali-unpack        join the parts of DALI that tools/fetch_device_dali.sh made (.dali1/ .dali2/ ..., one carried a
#                      call on one warm machine) into build/device/dali, then import it; later stages see it
#   e2e-dev[-LEVEL]    benchmarks/imagenet_train.py --device-decode: ResNet-50 from a DTS pack decoded on the device
#   stability          benchmarks/imagenet_train.py --quick at STAB_SEEDS (0 1 2), STAB_EPOCHS (4) epochs, fed by the
#                      device decode at a fixed STAB_SHARE (0.5) and by the CPU pipeline (STAB_MODES: device cpu):
#                      does training diverge with either (one JSON, imagenet_train_stability.json)
#   decstages          benchmarks/device_decode_stages.py: each stage of the device decode timed alone
#   e2e-refused        e2e-dev from the plain level-0 pack twice: the engine's refusals (progressive files) decoded by
#                      nvJPEG's decoupled decoder (--refused nvjpeg), then by libjpeg-turbo (--refused cpu)
#   hybrid             benchmarks/hybrid_decode.py: nvJPEG's decoupled path (GPU-hybrid backend) against the engine and
#                      libjpeg-turbo, progressive files included, alone and beside a GEMM load
#   contexts           benchmarks/nvjpeg_contexts.py: nvJPEG's decode beside a GEMM load, in one process or two
#   breakdown          benchmarks/chain_breakdown.py: one core's time per stage of the ImageNet chain, tr vs Pillow
#   scaling-mnist      benchmarks/pipeline_scaling.py, the MNIST chain only, claimed, 1 and all workers
#   scaling-probe      the ImageNet chain at 1, n/2, n-1, n workers with OS counters against n processes, again with
#                      glibc never trimming its heaps; the MNIST chain at 1 and n workers
#   mnist-twin         benchmarks/mnist_torch_gpu.py alone (TWIN_EPOCHS, default 100)
#   mnist              benchmarks/mlp_mnist.py: tr-device, tr on MNIST_WORKERS (16) workers, torchvision, the twin
#                      (MNIST_RUNS, MNIST_EPOCHS, MNIST_SEEDS and TWIN_SEEDS (123), TWIN_EPOCHS (100), MNIST_EMA
#                      (an EMA decay, validated, on both sides), MNIST_FC_GAIN (tr's FC init gain), MNIST_AMP_DTYPE
#                      (fp16 | bf16: AMP's type on every row))
#   restests           the device-augmentation GPU tests (test_gpu_resident.py, test_cuda_augment.py) alone
#   cross              benchmarks/cross_machine.py (issue [14]): the weights' and states' hashes and the engines after 20
#                      steps of VGG16-BN and ResNet-50, CROSS_ARGS (e.g. "--autotune"); JSON cross${CROSS_TAG}.json
#   convergence        benchmarks/convergence.py (issue [14]): tr and its PyTorch twins trained to convergence, CONV_ARGS
#                      (e.g. "--precisions fp32", "--imagenet"); JSON convergence${CONV_TAG}.json, log convergence.log
#   convergence-tr, convergence-pytorch   the same for one framework (JSON convergence_FW${CONV_TAG}.json, log
#                      convergence-FW.log)
#   regress            benchmarks/regression.py (issue [15]): this tree against older ones in one call. Each old tree
#                      of REGRESS_OLD (names, default 84bb0c5) is carried as .oldtree/NAME.tar (git archive OLD
#                      packages benchmarks examples tools > .oldtree/NAME.tar, here), unpacked under
#                      build/device/old-NAME and built there by its own h200_session.sh into ${TR_SITE}-old-NAME; then
#                      tr's cnn.py rows (REGRESS_MODELS, default all four) and the MNIST MLP of both trees, pair by
#                      pair (REGRESS_ARGS, e.g. "--rounds 3"); JSON regression_NAME.json
#   genstats[-MODEL]   benchmarks/conv_genstats_probe.py (issue [18]): cuDNN's conv + genstats and scale-bias-relu-conv-
#                      genstats against the plain convolution for every conv of MODEL (default resnet50) a BN follows:
#                      a deterministic engine?, sums that repeat?, their error, the time; JSON conv_genstats_MODEL.json
#   bg:STAGE           STAGE (convergence[-FW], cross) in the background, its output in its log only, joined before the
#                      summary: e.g. "build bg:convergence-tr bg:convergence-pytorch gpusuite" trains both sides' MNIST
#                      runs on the GPU beside the suite (neither measures speed; the suite's tests take longer)
# libjpeg-turbo: the machine lacks its headers; carry the prefix tools/fetch_device_jpeg.sh makes at .devdata/jpeg
# (include/ jpeglib.h, jconfig.h, jmorecfg.h, jerror.h; lib/ libjpeg.so and libjpeg.so.62, plain copies: links do
# not travel): CMake finds it through CMAKE_PREFIX_PATH and the extension loads it through LD_LIBRARY_PATH.
# Every stage after build checks that $SITE holds a build of this very tree and runs the build first if not.
#
# Environment: OUT (where logs and JSON go; default build/device/out), PYTHON (python3), TR_SITE (/tmp/site),
# TR_SESSION_BUDGET_S (570: seconds this script may run; stages are cut to what is left and the summary still
# prints), TR_BUILD_LIMIT_S (420), TR_GPUTESTS_LIMIT_S (300), TR_GPUSUITE_LIMIT_S (540), TR_PROFILE_LIMIT_S (240: per model) (each
# stage's own limit, cut to what is left of the budget), PROFILE_BATCH (256), PROFILE_ARGS, BENCH_ARGS (extra arguments, e.g. BENCH_ARGS="--compile-mode
# default,max-autotune"), GPUTESTS (the test paths of stage gputests), TR_REQUIRE_GPU (1; 0 for a smoke test on a
# machine without a GPU).
# Files under $OUT (at most 8 come back): build.log gputests.log gpusuite.log profile.log trace.log bench.log, the gpu_suite_* files,
# profile_<model>_b<N>.json per profiled model, trace_<model>_b<N>.json per traced model, <model>_b256_<date>.json per benchmarked model.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
PY=${PYTHON:-python3}
SITE=${TR_SITE:-/tmp/site}
BUILD=$ROOT/build/device
OUT=${OUT:-$BUILD/out}
ARCHS=${TR_CUDA_ARCHS:-90}
REQUIRE_GPU=${TR_REQUIRE_GPU:-1}
BUDGET=${TR_SESSION_BUDGET_S:-570}
START=${TR_SESSION_START:-$(date +%s)}
export TR_SESSION_START=$START
mkdir -p "$OUT" "$BUILD/summary" "$SITE"
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
if [ -f "$ROOT/.devdata/jpeg/include/jpeglib.h" ]; then
  export CMAKE_PREFIX_PATH=$ROOT/.devdata/jpeg${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$ROOT/.devdata/jpeg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export TR_IMAGES=${TR_IMAGES:-/tmp/tr_bench_images}
# the machine has no scikit-image: tools/make_image_folder.py reads the photographs carried at .devdata/photos.npz
# (python tools/make_image_folder.py --export-sources .devdata/photos.npz, here)
if [ -f "$ROOT/.devdata/photos.npz" ]; then export TR_IMAGE_SOURCES=${TR_IMAGE_SOURCES:-$ROOT/.devdata/photos.npz}; fi
if [ -d "$BUILD/dali/dali_site/nvidia/dali" ]; then  # (stage dali-unpack) after $SITE: its nvidia/ folders first
  export PYTHONPATH=$PYTHONPATH:$BUILD/dali/dali_site
  # the image codec's JPEG extension loads libnvjpeg.so.13: the nvidia-nvjpeg wheel of .whl, in $SITE/nvidia/cu13
  export LD_LIBRARY_PATH=$SITE/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# torch.compile's caches (FX graphs, autotuning, Triton kernels) under build/device: a warm machine keeps them, so a
# max-autotune compile cut off by one call's limit resumes in the next (cold compile times come from the first)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$BUILD/inductor} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$BUILD/triton}

# a hash of the source files under the given folders (the device copy has no .git): over packages/, the build
# marker; over packages/ benchmarks/ examples/, the JSONs' environment.tree
tree_hash() {
  find "$@" -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \
    -o -name '*.hpp' -o -name '*.h' -o -name '*.in' -o -name '*.cmake' -o -name 'CMakeLists.txt' \
    -o -name 'pyproject.toml' \) -not -path '*/build/*' -not -path '*/__pycache__/*' -print0 | sort -z \
    | xargs -0 sha1sum | sha1sum | cut -c1-16
}
export TR_TREE_HASH=${TR_TREE_HASH:-$(tree_hash packages benchmarks examples)}
export TR_BUILD_HASH=${TR_BUILD_HASH:-$(tree_hash packages)}
export TR_DATA_HASH=${TR_DATA_HASH:-$(tree_hash packages/tr-core packages/tr-data)}
BUILD_LIMIT=${TR_BUILD_LIMIT_S:-420} TESTS_LIMIT=${TR_GPUTESTS_LIMIT_S:-300} PROFILE_LIMIT=${TR_PROFILE_LIMIT_S:-240}
SUITE_LIMIT=${TR_GPUSUITE_LIMIT_S:-540}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

# --- stages (each runs in its own bash: `bash h200_session.sh __stage NAME`) -------------------------------
install_carried_wheels() {
  if ! compgen -G ".whl/*.whl" >/dev/null; then  # fine where $SITE or the machine has them already
    echo "[build] warning: no wheels in .whl/ (tools/fetch_device_wheels.sh makes them; carry .whl)"
  fi
  # install a carried wheel only where the machine lacks its distribution or has it older than hatchling needs
  "$PY" - "$BUILD/wheels.txt" <<'EOF' || return 1
import importlib.metadata as md, pathlib, re, sys

need = {"packaging": (24, 2), "pathspec": (0, 10, 1), "pluggy": (1, 0)}  # hatchling 1.33's requirements
def ver(s): return tuple(int(x) for x in re.findall(r"\d+", s)[:3])
picked = []
for whl in sorted(pathlib.Path(".whl").glob("*.whl")):
    name, version = whl.name.split("-")[:2]
    key = re.sub(r"[-_.]+", "-", name).lower()
    try:
        have = md.version(key)
    except md.PackageNotFoundError:
        have = None
    if have is not None and ver(have) >= need.get(key, ()):
        print(f"[build]   {key}: the machine has {have}, kept")
        continue
    print(f"[build]   {key}: {'missing' if have is None else have + ' is too old'}, installing {version}")
    picked.append(str(whl))
pathlib.Path(sys.argv[1]).write_text("".join(p + "\n" for p in picked))
EOF
  if [ -s "$BUILD/wheels.txt" ]; then
    # shellcheck disable=SC2046
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      $(cat "$BUILD/wheels.txt") || return 1
  fi
}

stage_build() {
  echo "[build] packages $TR_BUILD_HASH, python $($PY -c 'import sys; print(sys.version.split()[0])'), site $SITE"
  install_carried_wheels || return 1
  local fe
  fe=$("$PY" -c "
import importlib.metadata as m
d = m.distribution('nvidia-cudnn-frontend')
print(next(d.locate_file(f).parent for f in d.files if str(f).endswith('include/cudnn_frontend.h')))") || {
    echo "[build] nvidia-cudnn-frontend is not importable: its headers are missing"; return 1; }
  echo "[build] cuDNN frontend headers: $fe"
  local wheels=$BUILD/wheels
  rm -rf "$wheels" && mkdir -p "$wheels"
  local PIPW=("$PY" -m pip wheel --no-deps --no-build-isolation --no-cache-dir --no-index --disable-pip-version-check
              -w "$wheels")
  echo "[build] pure packages (hatchling)"
  "${PIPW[@]}" -q packages/tr-core packages/tr-tensor packages/tr-algo packages/tr-graph packages/tr-task || return 1
  local d
  for d in "$BUILD/tr-data" "$BUILD/tr-backend-sm$ARCHS"; do  # a CMake cache made for another source path
    if [ -f "$d/CMakeCache.txt" ] && ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT/packages/" "$d/CMakeCache.txt"; then
      echo "[build] $d was configured for another tree: starting it afresh"; rm -rf "$d"
    fi
  done
  local t0=$SECONDS
  echo "[build] tr-data (native)"
  "${PIPW[@]}" -C "build-dir=$BUILD/tr-data" packages/tr-data || return 1
  echo "[build] tr-data: $((SECONDS - t0)) s; tr-backend (native, CUDA archs $ARCHS)"
  t0=$SECONDS
  TR_BACKEND_CUDA=ON TR_CUDA_ARCHS=$ARCHS TR_CUDNN_FRONTEND_INCLUDE=$fe CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "${PIPW[@]}" -C "build-dir=$BUILD/tr-backend-sm$ARCHS" packages/tr-backend || return 1
  echo "[build] tr-backend: $((SECONDS - t0)) s"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$wheels"/*.whl || return 1
  rm -f "$SITE/.tr_tree"
  "$PY" - <<'EOF' || return 1
import os
import tr.backend._native as n
import tr.backend.cuda as c
info = dict(n.build_info())
print("[build] build_info:", info)
assert info["cuda_compiled"], "tr-backend was built without its CUDA part"
assert n.cudnn_frontend_built(), "convolutions built without the cuDNN frontend"
ok, why = c.cuda_status()
print("[build] cuda_status:", ok, why)
if os.environ.get("TR_REQUIRE_GPU", "1") == "1":
    assert ok, "no usable CUDA device: " + why
    print("[build] cuDNN:", c.load_cudnn())
EOF
  echo "$TR_BUILD_HASH" >"$SITE/.tr_tree"
}

stage_build_data() {  # tr-core (hatchling) and the native tr-data into $SITE
  echo "[build-data] tr-core + tr-data $TR_DATA_HASH, python $($PY -c 'import sys; print(sys.version.split()[0])')"
  install_carried_wheels || return 1
  local wheels=$BUILD/wheels-data
  rm -rf "$wheels" && mkdir -p "$wheels"
  local PIPW=("$PY" -m pip wheel --no-deps --no-build-isolation --no-cache-dir --no-index --disable-pip-version-check
              -w "$wheels")
  "${PIPW[@]}" -q packages/tr-core || return 1
  "${PIPW[@]}" -C "build-dir=$BUILD/tr-data" -C cmake.define.TR_DATA_JPEG=ON packages/tr-data 2>&1 \
    | grep -E "tr-data:|error|Error|warning" || true
  compgen -G "$wheels/tr_data-*.whl" >/dev/null || { echo "[build-data] the tr-data wheel was not built"; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$wheels"/*.whl || return 1
  "$PY" -c "import tr.data._native as n; print('[build-data] jpeg_available:', n.jpeg_available())" || return 1
  echo "$TR_DATA_HASH" >"$SITE/.tr_data_tree"
}

stage_datatests() {
  "$PY" -m pytest -q -rfE -p no:cacheprovider -n 8 -p no:benchmark --maxfail=25 packages/tr-data
}

stage_scaling() {  # $1: workloads, $2: schemes
  "$PY" benchmarks/pipeline_scaling.py --workload "$1" --schemes "$2" --workers "1,2,4,8,$(nproc)" \
    --images "$TR_IMAGES" --make 4000 --json "$OUT/pipeline_scaling.json"
}

stage_loaders() {
  "$PY" benchmarks/imagenet_pipeline.py --images "${TR_IMAGES}_2k" --make 2000 --workers "1,$(nproc)" \
    --epochs 2 --ab "${LOADERS_AB:-0}" --json "$OUT/imagenet_pipeline.json"
}

stage_loaders_vs() {  # only the per-core comparison: LOADERS_VS (default 7) interleaved one-worker pairs
  "$PY" benchmarks/imagenet_pipeline.py --images "${TR_IMAGES}_2k" --make 2000 --workers 1 --no-table --ab 0 \
    --vs-torchvision "${LOADERS_VS:-7}" --json "$OUT/imagenet_pipeline_vs.json"
}

stage_breakdown() {
  [ -d "${TR_IMAGES}_2k" ] || "$PY" tools/make_image_folder.py "${TR_IMAGES}_2k" --per-class 200 --val-per-class 2
  "$PY" benchmarks/chain_breakdown.py --images "${TR_IMAGES}_2k" --limit 500 --json "$OUT/chain_breakdown.json"
}

stage_scaling_probe() {  # what one process of W threads pays that W one-thread processes do not
  local n
  n=$(nproc)
  "$PY" benchmarks/pipeline_scaling.py --workload imagenet --schemes claimed --workers "1,$((n / 2)),$((n - 1)),$n" \
    --images "$TR_IMAGES" --make 4000 --independent "$n" --json "$OUT/pipeline_scaling_probe.json" || return 1
  # glibc never trims or mmaps: no freed page is given back, so no TLB shootdown and no fault to refill it
  GLIBC_TUNABLES=glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=1073741824:glibc.malloc.top_pad=67108864 \
    "$PY" benchmarks/pipeline_scaling.py --workload imagenet --schemes claimed --workers "1,$n" \
    --images "$TR_IMAGES" --independent "$n" --json "$OUT/pipeline_scaling_probe_notrim.json" || return 1
  "$PY" benchmarks/pipeline_scaling.py --workload mnist --schemes claimed --workers "1,$n" --independent "$n" \
    --json "$OUT/pipeline_scaling_probe_mnist.json"
}

stage_mnist_twin() {  # the GPU-resident PyTorch twin of the MNIST MLP alone (no tr)
  "$PY" benchmarks/mnist_torch_gpu.py --epochs "${TWIN_EPOCHS:-100}" --json "$OUT/mnist_torch_gpu.json"
}

stage_mnist() {  # the MNIST MLP: tr-device, tr on CPU workers, torchvision and the GPU-resident twin; MNIST_RUNS runs
  local r
  for r in $(seq "${MNIST_RUNS:-1}"); do
    "$PY" benchmarks/mlp_mnist.py --epochs "${MNIST_EPOCHS:-100}" --workers "${MNIST_WORKERS-16}" --torch-epochs 2 \
      --gpu-twin-epochs "${TWIN_EPOCHS:-100}" --seeds "${MNIST_SEEDS:-123}" --twin-seeds "${TWIN_SEEDS:-123}" \
      ${MNIST_EMA:+--ema "$MNIST_EMA"} ${MNIST_FC_GAIN:+--fc-gain "$MNIST_FC_GAIN"} \
      ${MNIST_AMP_DTYPE:+--amp-dtype "$MNIST_AMP_DTYPE"} --json "$OUT/mlp_mnist_$r.json" || return 1
  done
}

stage_restests() {  # the device-augmentation GPU tests alone
  "$PY" -m pytest -m gpu -v -rfE -p no:cacheprovider tests-integration/test_gpu_resident.py \
    packages/tr-backend/tests/test_cuda_augment.py
}

stage_convergence() {  # benchmarks/convergence.py: starts no run it cannot finish 20 s before the stage's limit
  # [FRAMEWORK]: that framework's runs only, in convergence_FRAMEWORK${CONV_TAG}.json (two such stages run side by side)
  local fw=${1:-}
  # shellcheck disable=SC2086
  "$PY" benchmarks/convergence.py ${CONV_ARGS:-} ${fw:+--frameworks "$fw"} \
    --deadline-s $(( ${TR_STAGE_LIMIT_S:-570} - 20 )) --json "$OUT/convergence${fw:+_$fw}${CONV_TAG:-}.json"
}

stage_cross() {  # benchmarks/cross_machine.py: 20 steps of VGG16-BN and ResNet-50 from one seed, hashes and engines
  # shellcheck disable=SC2086
  "$PY" benchmarks/cross_machine.py ${CROSS_ARGS:-} --json "$OUT/cross${CROSS_TAG:-}.json"
}

stage_scaling_mnist() {
  "$PY" benchmarks/pipeline_scaling.py --workload mnist --workers "1,$(nproc)" --schemes claimed \
    --json "$OUT/pipeline_scaling_mnist.json"
}

stage_e2e() {  # $1: DTS level
  # shellcheck disable=SC2086
  "$PY" benchmarks/imagenet_train.py --images /tmp/tr_train_images --make 12800 --level "$1" --epochs 3 ${E2E_ARGS:-} \
    --json "$OUT/imagenet_train_dts$1${E2E_TAG:-}.json"
}

stage_e2e_dev() {  # $1: DTS level
  # shellcheck disable=SC2086
  "$PY" benchmarks/imagenet_train.py --images /tmp/tr_train_images --make 12800 --level "$1" --epochs 3 --device-decode \
    ${E2E_DEV_ARGS:-} --json "$OUT/imagenet_train_dts$1_device_decode${E2E_DEV_TAG:-}.json"
}

stage_stability() {  # the same short training at STAB_SEEDS, fed by the device decode (a fixed share) and the CPU
  local seed mode d=$BUILD/stab  # (not under $OUT: at most 8 files come back)
  rm -rf "$d" && mkdir -p "$d"
  for seed in ${STAB_SEEDS:-0 1 2}; do
    for mode in ${STAB_MODES:-device cpu}; do
      # shellcheck disable=SC2046
      # shellcheck disable=SC2086
      "$PY" benchmarks/imagenet_train.py --images /tmp/tr_train_images --make 12800 --level 0 --quick ${STAB_ARGS:-} \
        --epochs "${STAB_EPOCHS:-4}" --seed "$seed" $([ "$mode" = device ] && echo --device-decode --cpu-share \
        "${STAB_SHARE:-0.5}") --json "$d/${mode}_seed$seed.json" || return 1
      # one JSON of the runs so far: a stage cut short keeps what it ran
      "$PY" -c "
import json, pathlib, sys
runs = {p.stem: json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob('*.json'))}
pathlib.Path(sys.argv[2]).write_text(json.dumps(runs, indent=1) + '\n')" "$d" "$OUT/imagenet_train_stability.json"
    done
  done
}

stage_jpegtests() {
  "$PY" -m pytest -m gpu -v -rfE -s -p no:cacheprovider packages/tr-backend/tests/test_cuda_image.py \
    tests-integration/test_gpu_jpeg_decode.py tests-integration/test_gpu_jpeg_feeder.py \
    tests-integration/test_gpu_jpeg_training.py
}

stage_decstages() {
  "$PY" benchmarks/device_decode_stages.py --images "${TR_IMAGES}_2k" --make 2000 --json "$OUT/device_decode_stages.json"
}

stage_e2e_refused() {  # ResNet-50 from the plain level-0 pack, the engine's refusals by nvJPEG, then by the CPU
  local r
  for r in nvjpeg cpu; do
    "$PY" benchmarks/imagenet_train.py --images /tmp/tr_train_images --make 12800 --level 0 --epochs 3 \
      --device-decode --refused "$r" --json "$OUT/imagenet_train_dts0_device_decode_refused_$r.json" || return 1
  done
}

stage_hybrid() {
  "$PY" benchmarks/hybrid_decode.py --images "${TR_IMAGES}_2k" --make 2000 --json "$OUT/hybrid_decode.json"
}

stage_contexts() {
  "$PY" benchmarks/nvjpeg_contexts.py --json "$OUT/nvjpeg_contexts.json"
}

stage_devdecode() {
  "$PY" benchmarks/imagenet_pipeline.py --device cuda --images "${TR_IMAGES}_6k" --make 6000 --epochs 3 \
    --json "$OUT/imagenet_device_decode.json"
}

stage_dali_unpack() {
  local parts
  mapfile -t parts < <(printf '%s\n' .dali[0-9]*/dali.tar.xz.[0-9]* | awk -F. '{print $NF" "$0}' | sort -n | cut -d' ' -f2)
  [ -f "${parts[0]:-}" ] || { echo "[dali] no parts: carry .dali1, .dali2, ... (tools/fetch_device_dali.sh)"; return 1; }
  echo "[dali] joining ${#parts[@]} parts: ${parts[*]}"
  rm -rf "$BUILD/dali" && mkdir -p "$BUILD/dali"
  cat "${parts[@]}" | "$PY" -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall(sys.argv[1], filter='data')" \
    "$BUILD/dali" || { rm -rf "$BUILD/dali"; echo "[dali] the parts do not make a whole archive (one missing?)"; return 1; }
  PYTHONPATH=$PYTHONPATH:$BUILD/dali/dali_site "$PY" -c "import nvidia.dali as d; print('[dali] DALI', d.__version__)"
}

stage_gputests() {  # GPUTESTS (default: every package and tests-integration): the paths / node ids to run
  # shellcheck disable=SC2086
  "$PY" -m pytest -m gpu -q -rfE -s -p no:cacheprovider --maxfail=25 ${GPUTESTS:-packages tests-integration}
}

stage_gpusuite() {  # tools/gpu_suite.py within the stage's limit (exec: the runner gets timeout's SIGTERM itself)
  # shellcheck disable=SC2086
  exec "$PY" tools/gpu_suite.py --shard "${GPU_SHARD:-all}" --budget $(( ${TR_STAGE_LIMIT_S:-$SUITE_LIMIT} - 5 )) \
    --out "$OUT" --work "$BUILD/gpusuite" ${GPUSUITE_PATHS:-packages tests-integration} ${GPUSUITE_ARGS:-}
  # (the paths first: --rerun-failed takes every word after it)
}

stage_profile() {  # $1: model
  local m=$1 b=${PROFILE_BATCH:-256}
  [ "$m" = mlp_mnist ] && b=${PROFILE_BATCH_MLP:-128}
  # shellcheck disable=SC2086
  "$PY" benchmarks/step_profile.py --model "$m" --batch "$b" --top 15 ${PROFILE_ARGS:-} \
    --json "$OUT/profile_${m}_b$b.json"
}

stage_trace() {  # $1: model
  local m=$1 b=${PROFILE_BATCH:-256}
  [ "$m" = mlp_mnist ] && b=${PROFILE_BATCH_MLP:-128}
  "$PY" benchmarks/kernel_trace.py --model "$m" --batch "$b" --top 30 --json "$OUT/trace_${m}_b$b.json"
}

stage_regress() {  # this tree against each old tree REGRESS_OLD names (.oldtree/NAME.tar), built here, pair by pair
  local name t0=$SECONDS left
  for name in ${REGRESS_OLD:-84bb0c5}; do
    local tar=$ROOT/.oldtree/$name.tar old=$BUILD/old-$name site_old=${SITE}-old-$name
    [ -f "$tar" ] || { echo "[regress] carry .oldtree/$name.tar (git archive of the old tree)"; return 1; }
    if [ ! -f "$old/.unpacked" ] || [ "$tar" -nt "$old/.unpacked" ]; then
      rm -rf "$old" "$site_old" && mkdir -p "$old" && tar -xf "$tar" -C "$old" || return 1
      touch "$old/.unpacked"
    fi
    local l
    for l in .whl .devdata data; do [ -e "$old/$l" ] || ln -s "$ROOT/$l" "$old/$l"; done
    left=$(( TR_STAGE_LIMIT_S - (SECONDS - t0) ))
    # the old tree's own build, in its own site; its script computes its own hashes and budget
    (cd "$old" && env -u PYTHONPATH -u TR_TREE_HASH -u TR_BUILD_HASH -u TR_DATA_HASH -u TR_SESSION_START \
       TR_SITE="$site_old" OUT="$BUILD/old-out-$name" TR_SESSION_BUDGET_S=$(( left - 100 )) \
       bash benchmarks/h200_session.sh build | tail -n 5) || return 1
    [ -f "$site_old/.tr_tree" ] || { echo "[regress] $name did not build: $BUILD/old-out-$name/build.log"; return 1; }
    echo "[regress] $name built ($((SECONDS - t0)) s into the stage)"
    left=$(( TR_STAGE_LIMIT_S - (SECONDS - t0) ))
    # shellcheck disable=SC2086
    "$PY" benchmarks/regression.py --old-root "$old" --old-site "$site_old" --new-site "$SITE" \
      --models "${REGRESS_MODELS:-vgg16_bn,resnet50,mobilenet_v2,efficientnet_b0,mlp_mnist}" ${REGRESS_ARGS:-} \
      --deadline-s $(( left - 100 )) --json "$OUT/regression_$name.json"
  done
}

stage_genstats() {  # $1: model
  "$PY" benchmarks/conv_genstats_probe.py --model "$1" --deadline-s $(( TR_STAGE_LIMIT_S - 60 )) \
    --json "$OUT/conv_genstats_$1.json"
}

stage_bench() {  # $1: model, $2: seconds left for it
  # shellcheck disable=SC2086
  "$PY" benchmarks/cnn.py --model "$1" --json auto --json-dir "$OUT" --deadline-s "$2" ${BENCH_ARGS:-}
}

if [ "${1:-}" = __stage ]; then
  shift
  name=$1
  shift
  "stage_$name" "$@"
  exit $?
fi

# --- the run ------------------------------------------------------------------------------------------------
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build gputests profile bench)
plan=()
for s in "${stages[@]}"; do
  case $s in
    build|gputests|gpusuite|build-data|datatests|breakdown|scaling-mnist|scaling|scaling-imagenet|scaling-probe|loaders|loaders-vs) plan+=("$s") ;;
    mnist-twin|mnist|restests|jpegtests|devdecode|decstages|contexts|stability|hybrid|e2e-refused) plan+=("$s") ;;
    e2e-dev) plan+=(e2e-dev-0) ;;
    e2e-dev-[0-3]) plan+=("$s") ;;
    pipeline) plan+=(scaling loaders) ;;
    e2e) plan+=(e2e-0) ;;
    e2e-[0-3]) plan+=("$s") ;;
    profile) plan+=(profile-vgg16_bn profile-resnet50) ;;
    bench) plan+=(bench-vgg16_bn bench-resnet50) ;;
    trace) plan+=(trace-vgg16_bn trace-resnet50) ;;
    profile-vgg16_bn|profile-resnet50|profile-mobilenet_v2|profile-efficientnet_b0|profile-mlp_mnist) plan+=("$s") ;;
    bench-vgg16_bn|bench-resnet50|bench-mobilenet_v2|bench-efficientnet_b0) plan+=("$s") ;;
    trace-vgg16_bn|trace-resnet50|trace-mlp_mnist) plan+=("$s") ;;
    convergence|convergence-tr|convergence-pytorch|cross|regress) plan+=("$s") ;;
    genstats) plan+=(genstats-resnet50) ;;
    genstats-resnet50|genstats-vgg16_bn|genstats-mobilenet_v2|genstats-efficientnet_b0) plan+=("$s") ;;
    bg:convergence|bg:convergence-tr|bg:convergence-pytorch|bg:cross) plan+=("$s") ;;
    *) echo "unknown stage $s (build build-data gputests gpusuite datatests pipeline e2e[-LEVEL] profile[-MODEL]" \
            "trace[-MODEL] bench[-MODEL])" >&2; exit 2 ;;
  esac
done

results=()
run() {  # run STAGE LOG LIMIT ARGS...: one stage under a timeout cut to the session's budget
  local stage=$1 log=$2 limit=$3
  shift 3
  local l
  l=$(( $(left) - 20 ))  # the summary's share
  (( l < limit )) && limit=$l
  if (( limit < 30 )); then
    results+=("$stage|skipped|0|only $(left) s of the session's $BUDGET s left")
    return 1
  fi
  echo "=== $stage (at most $limit s) ===" | tee -a "$OUT/$log"
  local t0=$SECONDS rc
  TR_STAGE_LIMIT_S=$limit timeout -k 15 "$limit" bash "$0" __stage "$@" 2>&1 | tee -a "$OUT/$log"
  rc=$?
  local why=""
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after $limit s"
  results+=("$stage|$rc|$((SECONDS - t0))|$why")
  return $rc
}

bg_pids=()
run_bg() {  # run_bg STAGE LOG LIMIT ARGS...: run in the background (its output only in LOG); joined before the summary
  local stage=$1
  ( run "$@" >/dev/null; printf '%s\n' "${results[-1]}" >"$BUILD/summary/bg_$stage.result" ) &
  bg_pids+=($!)
}

build_failed=0
built_here() { [ "$(cat "$SITE/.tr_tree" 2>/dev/null)" = "$TR_BUILD_HASH" ]; }
ensure_built() {  # ensure_built STAGE: build first where needed; a failed build is not retried
  built_here && return 0
  if (( build_failed )); then
    results+=("$1|skipped|0|no build of this tree")
    return 1
  fi
  echo "tr in $SITE is not a build of this tree ($TR_BUILD_HASH): building first"
  run build build.log "$BUILD_LIMIT" build || { build_failed=1; results+=("$1|skipped|0|the build failed"); return 1; }
}

data_built() { built_here || [ "$(cat "$SITE/.tr_data_tree" 2>/dev/null)" = "$TR_DATA_HASH" ]; }
ensure_data() {  # ensure_data STAGE: tr-data (from either build) of this tree, else build-data first
  data_built && return 0
  run build-data build.log 240 build_data || { results+=("$1|skipped|0|the data build failed"); return 1; }
}

n_bench=0
for s in "${plan[@]}"; do [[ $s == bench-* ]] && n_bench=$((n_bench + 1)); done
for s in "${plan[@]}"; do
  case $s in
    build) run build build.log "$BUILD_LIMIT" build || build_failed=1 ;;
    gputests) ensure_built "$s" && run gputests gputests.log "$TESTS_LIMIT" gputests ;;
    gpusuite) ensure_built "$s" && run gpusuite gpusuite.log "$SUITE_LIMIT" gpusuite ;;
    build-data) run build-data build.log 240 build_data ;;
    datatests) ensure_data "$s" && run datatests datatests.log 180 datatests ;;
    scaling) ensure_data "$s" && run scaling pipeline.log 300 scaling mnist,imagenet claimed,static ;;
    scaling-imagenet) ensure_data "$s" && run scaling-imagenet pipeline.log 200 scaling imagenet claimed ;;
    loaders) ensure_data "$s" && run loaders pipeline.log 300 loaders ;;
    loaders-vs) ensure_data "$s" && run loaders-vs pipeline.log 300 loaders_vs ;;
    breakdown) ensure_data "$s" && run breakdown pipeline.log 120 breakdown ;;
    scaling-mnist) ensure_data "$s" && run scaling-mnist pipeline.log 90 scaling_mnist ;;
    scaling-probe) ensure_data "$s" && run scaling-probe pipeline.log 300 scaling_probe ;;
    mnist-twin) run mnist-twin mnist.log 240 mnist_twin ;;
    mnist) ensure_built "$s" && run mnist mnist.log 400 mnist ;;
    restests) ensure_built "$s" && run restests gputests.log 240 restests ;;
    jpegtests) ensure_built "$s" && run jpegtests gputests.log 240 jpegtests ;;
    devdecode) ensure_built "$s" && run devdecode pipeline.log 400 devdecode ;;
    dali-unpack) run dali-unpack pipeline.log 120 dali_unpack ;;
    decstages) ensure_built "$s" && run decstages pipeline.log 300 decstages ;;
    contexts) run contexts pipeline.log 200 contexts ;;
    stability) ensure_built "$s" && run stability e2e.log 500 stability ;;
    hybrid) ensure_built "$s" && run hybrid pipeline.log 200 hybrid ;;
    e2e-refused) ensure_built "$s" && run e2e-refused e2e.log 300 e2e_refused ;;
    convergence) ensure_built "$s" && run convergence convergence.log 570 convergence ;;
    convergence-tr|convergence-pytorch)
      ensure_built "$s" && run "$s" "$s.log" 570 convergence "${s#convergence-}" ;;
    bg:convergence) ensure_built "$s" && run_bg convergence convergence.log 570 convergence ;;
    bg:convergence-tr|bg:convergence-pytorch)
      ensure_built "$s" && run_bg "${s#bg:}" "${s#bg:}.log" 570 convergence "${s#bg:convergence-}" ;;
    bg:cross) ensure_built "$s" && run_bg cross cross.log 300 cross ;;
    cross) ensure_built "$s" && run cross cross.log 300 cross ;;
    regress) ensure_built "$s" && run regress regress.log 580 regress ;;
    genstats-*) ensure_built "$s" && run "$s" genstats.log 400 genstats "${s#genstats-}" ;;
    e2e-dev-*) ensure_built "$s" && run "$s" e2e.log 400 e2e_dev "${s#e2e-dev-}" ;;
    e2e-*) ensure_built "$s" && run "$s" e2e.log 300 e2e "${s#e2e-}" ;;
    profile-*) ensure_built "$s" && run "$s" profile.log "$PROFILE_LIMIT" profile "${s#profile-}" ;;
    trace-*) ensure_built "$s" && run "$s" trace.log "$PROFILE_LIMIT" trace "${s#trace-}" ;;
    bench-*)
      # the benchmarks share what is left; cnn.py stops starting rows in time to write its table and JSON
      share=$(( ($(left) - 30) / n_bench ))
      n_bench=$((n_bench - 1))
      ensure_built "$s" && run "$s" bench.log "$share" bench "${s#bench-}" $((share - 15)) ;;
  esac
done

# --- summary (the last lines of the call's output) -----------------------------------------------------------
for p in "${bg_pids[@]}"; do wait "$p"; done
for f in "$BUILD"/summary/bg_*.result; do
  [ -f "$f" ] || continue
  results+=("$(cat "$f")")
  rm -f "$f"
done
for f in "$OUT"/profile.log; do
  [ -f "$f" ] || continue
  echo
  awk '/^summary by op/{p=1} p{print} /^all ops/{p=0; print ""}' "$f" | cut -c1-150 | tail -n 80
done
if [ -f "$OUT/trace.log" ]; then
  echo
  grep -E '^(resnet50|vgg16_bn|mlp_mnist) batch' "$OUT/trace.log" | cut -c1-200
fi
for f in "$OUT"/pipeline.log "$OUT"/e2e.log "$OUT"/mnist.log; do
  [ -f "$f" ] || continue
  echo
  grep -E "images/s|losses|independent|reaches|x torchvision|window decode|Thread|Model name|affinity|cpu_flags|epochs_per_s|top-1" "$f" \
    | cut -c1-400 \
    | tail -n 60
done
if [ -f "$OUT/cross.log" ]; then
  echo
  grep -E 'weights sha256|wrote ' "$OUT/cross.log" | cut -c1-200
fi
if [ -f "$OUT/genstats.log" ]; then
  echo
  grep -E 'conv .* at |"(conv_genstats|sbr_conv_genstats|with_engine|plain_ms|fused_ms|sums_repeat_everywhere)"' \
    "$OUT/genstats.log" | cut -c1-200 | tail -n 40
fi
if [ -f "$OUT/regress.log" ]; then
  echo
  grep -E '^\[|^\|' "$OUT/regress.log" | cut -c1-200 | tail -n 30
fi
if [ -f "$OUT/bench.log" ]; then
  echo
  awk '/ training step, /{p=1} /^=== /{p=0} p && !/^note: /{print}' "$OUT/bench.log" | tail -n 60
fi
echo
echo "session summary (tree $TR_TREE_HASH, $(( $(date +%s) - START )) s of $BUDGET s; files in $OUT):"
printf '  %-20s %-8s %6s  %s\n' stage rc seconds note
for r in "${results[@]}"; do
  IFS='|' read -r st rc sec why <<<"$r"
  note=$why
  case $st in
    datatests) note="$note $(grep -E '[0-9]+ (passed|failed|error)' "$OUT/datatests.log" 2>/dev/null | tail -n 1)" ;;
    restests) note="$note $(grep -E '[0-9]+ (passed|failed|error)' "$OUT/gputests.log" 2>/dev/null | tail -n 1)" ;;
    gputests) note="$note $(grep -E '[0-9]+ (passed|failed|error)' "$OUT/gputests.log" 2>/dev/null | tail -n 1)" ;;
    gpusuite) note="$note $(grep -E '^[0-9]+ tests: ' "$OUT/gpusuite.log" 2>/dev/null | tail -n 1)" ;;
    build) note="$note $(grep -E '^\[build\] (tr-backend:|cuda_status)' "$OUT/build.log" 2>/dev/null | tail -n 2 | tr '\n' ' ')" ;;
  esac
  printf '  %-20s %-8s %6s  %s\n' "$st" "$rc" "$sec" "${note:0:150}"
done
ls -l "$OUT" | awk 'NR > 1 {printf "  %10d  %s\n", $5, $9}'
