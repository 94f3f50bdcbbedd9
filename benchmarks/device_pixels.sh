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
#   bash benchmarks/device_pixels.sh launch [ARGS]  # the paper-scale table in the background;
#                                                # ARGS go to benchmarks.pixels after the
#                                                # defaults (--arms drq sac --seeds 3 --workers 2),
#                                                # e.g. --arms sac --workers 3 --compile
#                                                # reduce-overhead (CUDA graphs)
#   bash benchmarks/device_pixels.sh collect S   # wait up to S seconds for it; copy what it has
#
# One arm of 3 seeds fits one call: `launch --arms sac --seeds 3 --workers 3 && collect 545`
# (stop 44 on an H200: data and C_V ~140 s, then 412-419 s of training; a second `collect 90`
# at once picked up the last cells).
# A background run outlives its call (setsid) while the machine is held: `collect` in the next
# call, within the idle release, picks it up. Everything that comes back is under $OUT.
# Another preset runs in a sweep of its own: RUN=/tmp/pxc for both `launch --preset
# benchmarks/params/pixels_cpu_drqnet.yaml --arms semore-m4 ...` and its `collect` (the CPU
# preset's semore, ~5 h a run on the 2-core CPU; 48.7 updates/s eager on the H200).
set -uo pipefail
OUT=${OUT:-/tmp/out}
RUN=${RUN:-/tmp/pxp}  # the sweep's --out; its log is $RUN.log
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
    # six cells side by side made under 139 agent steps/s together (stop 40), about one update
    # rate alone (116/s): one GPU time-slices processes. Three drq seeds (--workers 3) made 97
    # steps/s together and finished in 6.5 minutes after ~150 s of data (stop 41)
    setsid nohup python -m benchmarks.pixels --preset benchmarks/params/pixels_paper.yaml \
        --arms drq sac --seeds 3 --workers 2 --threads 4 --out "$RUN" --progress-every 60 "$@" \
        >"$RUN.log" 2>&1 </dev/null &
    echo "launched: pid $!"
    ;;
collect)
    setup
    deadline=$((SECONDS + ${2:-60}))
    running() { pgrep -f "benchmarks.pixels .*--out $RUN( |\$)" >/dev/null; }  # this sweep only
    while [ $SECONDS -lt $deadline ] && running; do
        sleep 10
    done
    cp "$RUN.log" "$OUT/pxp.log"
    for f in table.txt results.json curves.png; do
        [ -f "$RUN/$f" ] && cp "$RUN/$f" "$OUT/"
    done
    # how far each cell got: its resume state's step and last evaluation (a cell's live/ curve
    # is written when it ends)
    python -c "import pathlib, sys; from benchmarks.sweep import peek
for d in sorted(pathlib.Path(sys.argv[1]).glob('*')): print(d.name, peek(d))" "$RUN/resume" |
        tee "$OUT/progress.txt"
    kept=$(cd "$RUN" && ls -d live runs params.yaml 2>/dev/null)
    [ -n "$kept" ] && tar -czf "$OUT/pxp_curves.tgz" -C "$RUN" $kept
    running && echo "still running" || echo "finished"
    # the log's last lines, without the progress bars' carriage-return updates
    tr '\r' '\n' <"$RUN.log" | grep -v -e '%|' -e '^\s*$' | tail -20
    ;;
*)
    echo "usage: $0 throughput | graphs | launch [ARGS] | collect SECONDS" >&2
    exit 2
    ;;
esac
