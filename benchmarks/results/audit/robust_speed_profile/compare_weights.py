"""Whether two ``profile_keys.py`` runs wrote the same edited weights, bit for bit (their ``*_weights.json``
digests; exit 1 if not).

    python benchmarks/results/audit/robust_speed_profile/compare_weights.py A_weights.json B_weights.json
"""
import json
import sys

a, b = (json.load(open(path)) for path in sys.argv[1:3])
same = a == b
sys.stdout.write(f"layers {sorted(a)}: {'bit-identical' if same else 'DIFFERENT'}\n")
sys.exit(0 if same else 1)
