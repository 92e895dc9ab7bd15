import collections
import json
import sys

import numpy as np

r = json.load(open(sys.argv[1]))
g = collections.defaultdict(list)
for k, v in r.items():
    ds, n, d = k.split("/")
    u, w = v["unweighted"], v["weighted"]
    row = []
    for a in (u, w):
        row += [
            a["test"]["accuracy"],
            a["test"]["ece"],
            a["test_T"]["ece"],
            a["test"]["log_loss"],
            a["test_T"]["log_loss"],
            a["T"],
            -a["held_out"] - a["test"]["log_loss"],
            a.get("wide", {}).get("ece", np.nan),
            a.get("wide_T", {}).get("ece", np.nan),
        ]
    g[(ds, n)].append(row)
names = ["acc", "ece", "eceT", "ll", "llT", "T", "heldbias", "wece", "weceT"]
for key in sorted(g):
    a = np.array(g[key])
    m = a.mean(0)
    se = a.std(0, ddof=1) / np.sqrt(len(a))
    print(*key, len(a))
    for i, nm in enumerate(names):
        print(
            f"   {nm:8s} unw {m[i]:.3f}  w {m[i + 9]:.3f}  "
            f"diff {np.mean(a[:, i + 9] - a[:, i]):+.3f}±{np.std(a[:, i + 9] - a[:, i], ddof=1) / np.sqrt(len(a)):.3f}"
        )
