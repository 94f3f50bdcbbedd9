#!/usr/bin/env bash
# Issue 25's GPU checks on a lent device machine (the `device` tool: torch there, no mujoco,
# dm_control, gymnasium or polars; no network; 30 s idle release; 10 minutes a command).
#
# Carry (one call, 64 MiB with the working tree; both folders are in .gitignore):
#   .site/site.tar.xz  the missing distributions installed for the device's Python 3.12 and
#                      xz-compressed (55.7 MB; as wheels they need two calls), made here by
#                        python -m benchmarks.device_wheels --device-freeze FREEZE \
#                          --python-version 3.12 --out wheelhouse --site-archive
#                        mkdir -p .site && cp wheelhouse/site.tar.xz .site/
#                      (FREEZE: the device's `pip freeze`, or the package list of
#                      /work/.library/device/KINDS.md, one name a line:
#                        grep '^nvidia-h100-x1, nvidia-h200: their image' KINDS.md |
#                          sed 's/.*Packages: //; s/\.$//' | tr ',' '\n' | sed 's/^ *//'
#                      device_wheels runs from the repository root, as it traces a test:
#                      ~5 minutes on a fresh 2-core machine, 52.4 MiB in stop 44)
#   .gl/*.deb          EGL / GL loaders (libglvnd), for MUJOCO_GL=egl: apt-get download
#                      libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2
#
#   bash benchmarks/device_pixels.sh throughput  # updates/s on the GPU: eager, compiled, graphs
#   bash benchmarks/device_pixels.sh graphs      # 84x84: eager against CUDA graphs (~2 min)
#   bash benchmarks/device_pixels.sh launch CELL...  # cells of benchmarks/tables/pixels_paper.yaml
#                                                # as DVC experiments in the background, every
#                                                # seed of each cell, 3 side by side (JOBS=3)
#   bash benchmarks/device_pixels.sh collect S   # wait up to S seconds; report what is done
#
# One arm of 3 seeds fits one call: `launch drq && collect 545` (the retired benchmarks.pixels on
# an H200: data and C_V ~140 s, then 412-419 s of training). Each experiment builds the table's
# data in its own workspace unless DVC's run cache holds it: run one cell first, the rest restore
# it. The copy of the working tree becomes a git repository there (DVC experiments are git refs);
# `collect` brings back the report, `dvc exp show`'s rows and each experiment's curves. This recipe
# replaced the retired benchmarks.pixels sweep and has not yet run on a device.
# A background run outlives its call (setsid) while the machine is held: `collect` in the next
# call, within the idle release, picks it up. Everything that comes back is under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
TABLE=${TABLE:-benchmarks/tables/pixels_paper.yaml}  # or P2 at paper scale: frames_cartpole_paper.yaml
LOG=/tmp/pixels_paper.log
mkdir -p "$OUT"

setup() {
    if [ ! -d /tmp/site ]; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
        mkdir -p /tmp/site.partial
        xz -dc .site/site.tar.xz | tar -x -C /tmp/site.partial || exit 1
        # this project's own metadata: the dataset card records its version (importlib.metadata)
        version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
        info=/tmp/site.partial/vlmrl_pipeline-$version.dist-info
        mkdir -p "$info"
        printf 'Metadata-Version: 2.1\nName: vlmrl-pipeline\nVersion: %s\n' "$version" \
            >"$info/METADATA"
        mv /tmp/site.partial /tmp/site
    fi
    export PYTHONPATH=/tmp/site:$PWD MUJOCO_GL=egl PYTHONUNBUFFERED=1
    # the site archive has modules, no console scripts: `dvc` for pipeline.tools.sweeps and the queue
    mkdir -p /tmp/site-bin
    printf '#!/bin/sh\nexec python -m dvc "$@"\n' >/tmp/site-bin/dvc
    chmod +x /tmp/site-bin/dvc
    export PATH=/tmp/site-bin:$PATH
}

case ${1:-} in
throughput)
    setup
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
    python -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
    # DrQ's 84x84 network, eager against torch.compile (Inductor) and CUDA graphs
    timeout 200 python -m benchmarks.pixel_throughput --device cuda --configs 84:1:1024 \
        --compile default reduce-overhead --flops --updates 50 --repeats 3 --warmup 10 \
        --threads 4 2>&1 | grep -v Warning | tee "$OUT/throughput_gpu.txt"
    # the CPU preset's network at 64x64, and DrQ's own batch of 512
    timeout 60 python -m benchmarks.pixel_throughput --device cuda --configs 64:1:1024 \
        --flops --updates 50 --repeats 3 --threads 4 2>&1 | tee -a "$OUT/throughput_gpu.txt"
    timeout 60 python -m benchmarks.pixel_throughput --device cuda --configs 84:1:1024 \
        --batch 512 --flops --updates 30 --repeats 3 --threads 4 2>&1 |
        tee -a "$OUT/throughput_gpu.txt"
    ;;
graphs)
    setup
    python -c "import torch; print('torch', torch.__version__)" | tee "$OUT/gpu.txt"
    # on an H200: drq 148 against 101 eager (stop 41), erpv 103 against 84, semore m4 58
    # against 39 (stop 44; each in a process of its own, ~60 s each)
    timeout 300 python -m benchmarks.pixel_throughput --device cuda --configs 84:1:1024 \
        --compile reduce-overhead --compiled drq erpv semore --flops --updates 50 \
        --repeats 3 --warmup 10 --threads 4 2>&1 | grep -v Warning | tee "$OUT/throughput_gpu.txt"
    ;;
launch)
    setup
    shift
    if [ ! -d .git ]; then
        git init -q && git add -A &&
            git -c user.email=device@localhost -c user.name=device commit -qm device || exit 1
    fi
    cells=()
    for c in "$@"; do cells+=(--cell "$c"); done
    setsid nohup python -m pipeline.tools.sweeps queue "$TABLE" "${cells[@]}" --jobs "${JOBS:-3}" \
        --wait >"$LOG" 2>&1 </dev/null &
    echo "launched: pid $!"
    ;;
collect)
    setup
    deadline=$((SECONDS + ${2:-60}))
    running() { pgrep -f "pipeline.tools.sweeps queue" >/dev/null; }
    while [ $SECONDS -lt $deadline ] && running; do
        sleep 10
    done
    cp "$LOG" "$OUT/"
    python -m pipeline.tools.sweeps status "$TABLE" | tee "$OUT/status.txt"
    python -m pipeline.tools.sweeps report "$TABLE" --out "$OUT/report"
    dvc exp show --json >"$OUT/exp_show.json"
    # each experiment's curves: committed to its git ref, the cached ones read by dvc.api.open
    git for-each-ref --format='%(refname)' refs/exps | tee "$OUT/exp_refs.txt"
    running && echo "still running" || echo "finished"
    tail -20 "$LOG"
    ;;
*)
    echo "usage: $0 throughput | graphs | launch CELL... | collect SECONDS" >&2
    exit 2
    ;;
esac
