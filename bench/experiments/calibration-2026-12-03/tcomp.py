from pathlib import Path

HERE = Path(__file__).resolve().parent
import glob
import sys

import numpy as np

sys.path.insert(0, str(HERE))
import json

from calib import fitT

r = json.load(open(HERE / "mix.json"))
for f in sorted(glob.glob(str(HERE / "arrays" / "*.npz"))):
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
