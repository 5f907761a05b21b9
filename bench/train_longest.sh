#!/bin/bash
# The longest SFT sequence at batch 1 on this GPU, for a Llama-3-8B-shaped
# base, with every memory lever: segment_size 1, bf16 boundaries split
# between spare device memory and pinned host memory, the MLP in row chunks.
#
# Running 32 layers at half a million tokens would take ~40 minutes a step
# (the attention is quadratic), so the run computes 2 layers and holds the
# other 30 layers' memory as ballast: their weights and their device-kept
# boundaries on the device, their offloaded boundaries in pinned host memory.
# Device memory is then what the 32-layer model needs (the device holds one
# layer's activations at a time either way); the time is 2 layers' time.
#
# How many boundaries fit on the device is measured, not guessed: two short
# runs give the device peak per token of one layer's working set; the split
# for each candidate length follows from it and the device's size.
#   bash bench/train_longest.sh BIN DTYPE LENGTH... (DTYPE bf16 or q4_0; BIN holds train_step_bench)
set -u
bin=$1 dtype=$2
shift 2
b=$bin/train_step_bench
layers=32 hidden=4096
# Device bytes of the 30 layers not computed (Llama-3-8B: 218 M parameters a layer).
case $dtype in
  bf16) weights_gb=13.1 ;;
  q4_0) weights_gb=3.7 ;;
  *) echo "dtype: expected bf16 or q4_0, got $dtype" >&2; exit 2 ;;
esac
common="--shape llama3-8b --dtype $dtype --layers 2 --method sft --segment-size 1 --offload --mlp-chunk 4096 --boundary-dtype bf16"
peak_of() {  # LENGTH -> device peak in GB, from one step without ballast
  timeout 120 $b $common --longest "$1" 2>&1 | tee -a "${OUT:-/tmp}/longest.log" | grep -E "^\| .* sft $1 " |
    sed -E 's/.*process peak ([0-9.]+) GB.*/\1/'
}
p1=$(peak_of 65536) p2=$(peak_of 131072)
[ -n "$p1" ] && [ -n "$p2" ] || { echo "the short runs did not report a device peak: see ${OUT:-/tmp}/longest.log" >&2; exit 1; }
total_gb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | awk '{print $1 * 1.048576 / 1000}')
host_gb=$(awk '/MemTotal/ {print $2 * 1024 / 1e9}' /proc/meminfo)
echo "device peak without ballast: ${p1} GB at 65,536 tokens, ${p2} GB at 131,072; device ${total_gb} GB, host ${host_gb} GB"
for len in "$@"; do
  # bf16 boundary of one layer; the working set grows linearly (flash attention).
  plan=$(python3 - "$p1" "$p2" "$total_gb" "$host_gb" "$len" "$weights_gb" "$layers" "$hidden" <<'EOF'
import sys
p1, p2, total, host, n, wgb, layers, hidden = map(float, sys.argv[1:])
per_token = (p2 - p1) / 65536
peak = p2 + per_token * (n - 131072) + wgb            # one layer's working set + all weights
boundary = n * hidden * 2 / 1e9                       # GB
device_margin, host_margin = 6.0, 14.0                # allocator slack; the OS and the process
on_device = int((total - device_margin - peak) // boundary)
on_device = max(1, min(int(layers) - 1, on_device))
on_host = int(layers) - on_device
ok = on_host * boundary <= host - host_margin and peak + on_device * boundary <= total - device_margin
# The two computed layers: one boundary on the device, one on the host; the
# ballast holds the other 30 layers' share.
print(int(ok), on_device, on_host, round(wgb + (on_device - 1) * boundary, 2), round((on_host - 1) * boundary, 2),
      round(peak, 1), round(per_token * 1e6, 1))
EOF
)
  read -r ok dev host dev_ballast host_ballast peak kb <<<"$plan"
  echo "$len tokens: working set ${kb} KB/token, peak without boundaries ${peak} GB; boundaries ${dev} on the device, ${host} on the host (ballast ${dev_ballast} GB device, ${host_ballast} GB pinned host)"
  [ "$ok" = 1 ] || { echo "$len tokens: does not fit by the measured working set: skipped"; continue; }
  timeout 400 $b $common --device-boundaries 1 --ballast-gb "$dev_ballast" --host-ballast-gb "$host_ballast" \
    --longest "$len" 2>&1 | tee -a "${OUT:-/tmp}/longest.log" | grep -E "^\||longest|rror"
done
