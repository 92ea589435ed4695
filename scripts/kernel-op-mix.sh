#!/bin/sh
# What the integer attention kernel executes per token and kv head, by kind
# of instruction: vector ALU operations (what the vector pipes must issue),
# vector loads and broadcasts from memory (what the load ports must take),
# stores, scalar and prefetch instructions; and the vector operations most
# executed (f16 / bf16: the tile kernel over their rows). Counted exactly
# by callgrind over bench/int_kernel_bench.c (the kernel alone, tiles in
# cache: its compute, no memory), each executed instruction classified
# from the disassembly. Where
# scripts/kernel-instructions.sh says how many instructions a byte costs,
# this says which pipes they load. Needs valgrind, objdump and python3;
# ~20 s a codec. Usage:
#   scripts/kernel-op-mix.sh [-G N] [-k KERNEL] [CODEC ...]   (default: -G 3, q4_0 turbo3)
set -eu
G=3
kernel=avx2
while [ $# -gt 0 ]; do
    case $1 in
    -G) G=$2; shift 2 ;;
    -k) kernel=$2; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
    esac
done
codecs=${*:-q4_0 turbo3}
for tool in valgrind objdump python3; do
    command -v $tool > /dev/null || { echo "kernel-op-mix: $tool not found (apt-get install valgrind binutils python3)" >&2; exit 1; }
done
make -s build/int-kernel-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a position-dependent copy, so callgrind's addresses are the disassembly's
${CC:-cc} -no-pie -pthread -o "$tmp/bench" build/obj/bench/int_kernel_bench.o build/libkvq.a -lpthread -lm
objdump -d --no-show-raw-insn "$tmp/bench" > "$tmp/dis"
for c in $codecs; do
    echo "kernel-op-mix: $c ..." >&2
    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$tmp/cg.out" \
        "$tmp/bench" -k "$kernel" -G "$G" "$c" > "$tmp/out" 2> "$tmp/err" ||
        { echo "kernel-op-mix: $c failed:" >&2; tail -3 "$tmp/err" >&2; exit 1; }
    python3 - "$tmp/cg.out" "$tmp/dis" "$tmp/out" "$c" "$kernel" "$G" << 'EOF'
import collections, re, sys
cg, dis, out, codec, kernel, G = sys.argv[1:]
# the kernel and the per-kind functions it calls (decode_int_avx2.c,
# decode_vnni.c); -k makes the bench run only that kernel's
# (f16 / bf16: the tile kernel that reads their rows)
ours = re.compile(r'(kvq_attn_int_avx2|kvq_attn_vnni_avx512|scores_\d+_\d+|pv_\d+_\d+|kvq_attn_tile_b?f16_avx(2|512))$')
# the kernel ran passes x tokens tokens: the bench's header says how many
head = re.search(r'(\d+) tokens in tiles of \d+, best of (\d+)', open(out).readline())
tokens = int(head.group(1)) * int(head.group(2))
names, cost, fn, addr, after_call = {}, collections.Counter(), None, 0, False
for line in open(cg):
    if line.startswith('fn='):
        m = re.match(r'fn=\((\d+)\)(?: (.*))?', line.strip())
        if m.group(2): names[m.group(1)] = m.group(2)
        fn = names.get(m.group(1), '')
    elif line.startswith('cfn='):  # a callee's first mention names it too
        m = re.match(r'cfn=\((\d+)\)(?: (.*))?', line.strip())
        if m.group(2): names[m.group(1)] = m.group(2)
    elif line.startswith('calls='):
        after_call = True  # the next cost line is the call's inclusive cost
    elif line[:1] in '0123456789+-*':
        f = line.split()
        p = f[0]
        if p.startswith('0x'): addr = int(p, 16)
        elif p[0] in '+-': addr += int(p)
        if after_call: after_call = False
        elif ours.match(fn) and len(f) >= 3: cost[addr] += int(f[2])
ins = {}
for line in open(dis):
    m = re.match(r'\s+([0-9a-f]+):\s+(\S+)\s*(.*)', line)
    if m: ins[int(m.group(1), 16)] = (m.group(2), m.group(3))
kinds, ops = collections.Counter(), collections.Counter()
for a, n in cost.items():
    op, args = ins.get(a, ('?', ''))
    vec = 'mm' in args
    mem = '(' in args and not op.startswith(('lea', 'nop', 'prefetch'))
    if op.startswith('prefetch'): k = 'prefetch'
    elif not vec: k = 'scalar (incl. its loads / stores)'
    elif mem and args.rstrip().endswith(')'): k = 'vector store'
    elif mem and (op.startswith('vmov') or 'broadcast' in op): k = 'vector load / broadcast'
    else: k = 'vector ALU' + (' (+ a load operand)' if mem else '')
    kinds[k] += n
    if k.startswith('vector ALU'): ops[op] += n
total = sum(kinds.values())
print(f"{codec}, {kernel} kernel, G {G}: {total / tokens:.1f} instructions a token and kv head")
for k, n in kinds.most_common(): print(f"  {n / tokens:6.1f}  {k}")
print("  vector ALU operations, most executed:", ', '.join(f"{op} {n / tokens:.1f}" for op, n in ops.most_common(12)))
EOF
done
