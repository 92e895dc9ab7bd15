"""The temperature fitted on the pick's out-of-fold rows against the ones the wide and test texts ask for,
per draw, from exp_mix.py's arrays (``calib.ARRAYS``, in the cache folder outside the repository; regenerated
with the engine when absent) and its picks in mix.json.

usage: tcomp.py   (no engine once the arrays are in the cache)"""

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from calib import arrays, fitT

r = json.load(open(HERE / "mix.json"))
for f in arrays():
    z = np.load(f)
    key = f.split("/")[-1][:-4]
    if "oof" not in z or "wide" not in z:
        continue
    ds, n, d = key.rsplit("_", 2)
    yi = z["y_index"]
    rows = z["oof_rows"]
    to = fitT(z["oof"], yi[rows])
    lp = np.log(np.clip(z["wide"], 1e-300, None))
    tw = fitT(lp, z["yw"])
    lt = np.log(np.clip(z["test"], 1e-300, None))
    tt = fitT(lt, z["yt"])
    print(
        key,
        r[f"{ds}/{n}/{d}"]["unweighted"]["chose"][:45].ljust(45),
        f"T_oof {to:.2f} T_wide {tw:.2f} T_test {tt:.2f}",
        "n_oof",
        len(rows),
    )
