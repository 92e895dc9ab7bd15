"""Build seven public labelled text sets as normalised CSVs, from pinned GitHub snapshots.

The sources (repository, commit, paths, object ids, licences) are recorded in
``bench/public_sets.md``. Each snapshot must first be brought here with the session's
``fetch github:<owner>/<name>``, which leaves a git directory under
``/work/.mirror/<owner>+<name>/repo`` (override the root with ``LLM_LABEL_CLF_MIRROR``).
Every file is read from the pinned commit with git, and its git object id is checked
(the pinned blob id, or for a folder the pinned tree id plus each blob's own hash).

The CSVs go to ``~/.cache/llm_label_clf/datasets/`` (override with
``LLM_LABEL_CLF_PUBLIC_SETS``), never into the repository: ``text,label`` for the
single-label sets, ``text,labels[,split]`` for the multi-label ones (names joined
by ``|``, empty for a text with no label). Source order is kept; every dropped row
is counted and printed with its reason.

Usage: ``python bench/public_sets.py [name ...]`` (default: all seven).
"""

from __future__ import annotations

import hashlib
import html
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

MIRROR = Path(os.environ.get("LLM_LABEL_CLF_MIRROR", "/work/.mirror"))
CACHE = Path(os.environ.get("LLM_LABEL_CLF_PUBLIC_SETS", "~/.cache/llm_label_clf/datasets")).expanduser()

HATE = ("Vicomtech/hate-speech-dataset", "b802137e8314c38a8d4faa965f9908d6c8e7a84d")
DHIM = ("J-zin/DHIM", "477e226cdc5a2c83a6114e46187da1091bd6a345")
BBC = ("dejanbatanjac/bbc-article-classify-bert", "8265dc84e88b82b87ce7f5b2df5bbbb1159ae922")
REUTERS = ("colibri17/TextCategorization", "b6c2ca3d46a2540843400890792e5165448b4516")
SEMEVAL = ("cbaziotis/ntua-slp-semeval2018", "291038d032d9cc7604148345754958695eeb8f11")
NEWSGROUPS = ("YunomiXavia/20news-bydate", "2298b3e1c9f66cc3f2d8bf6da5dd68f15b37eb88")
TWEETEVAL = ("cardiffnlp/tweeteval", "4fbd22cd78421f05b1ecdb4fc5725bc7a7bd8f66")

DBPEDIA_CLASSES = {"Company", "EducationalInstitution", "Artist", "Athlete", "OfficeHolder", "MeanOfTransportation",
                   "Building", "NaturalPlace", "Village", "Animal", "Plant", "Album", "Film", "WrittenWork"}
REUTERS_TOP10 = ["earn", "acq", "money-fx", "grain", "crude", "trade", "interest", "ship", "wheat", "corn"]
EMOTIONS = ["anger", "anticipation", "disgust", "fear", "joy", "love", "optimism", "pessimism", "sadness",
            "surprise", "trust"]


def _git(source: tuple[str, str], *args: str) -> bytes:
    """Run git in the snapshot of ``source`` (repo, commit); fail clearly when it is missing."""
    repo, commit = source
    git_dir = MIRROR / repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        sys.exit(f"missing snapshot {git_dir}: run `fetch github:{repo}` first (needs commit {commit})")
    run = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)
    if run.returncode:
        sys.exit(f"git {' '.join(args[:3])} failed in {git_dir} ({run.stderr.decode().strip()}); the snapshot "
                 f"may lack commit {commit} or a file of it (>= 4 MiB): run `fetch github:{repo}` again")
    return run.stdout


def _object_id(source: tuple[str, str], path: str, expected: str) -> None:
    """Check that ``path`` at the pinned commit is the pinned git object."""
    found = _git(source, "rev-parse", f"{source[1]}:{path}").decode().strip()
    if found != expected:
        sys.exit(f"{source[0]}@{source[1]}:{path} is {found}, expected {expected}: wrong snapshot, fetch github:"
                 f"{source[0]} again")


def _hash_check(repo: str, path: str, blob_id: str, data: bytes) -> bytes:
    """Return ``data`` after checking it hashes to the git blob id ``blob_id``."""
    if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != blob_id:
        sys.exit(f"{repo}:{path} does not match its blob id {blob_id}: fetch github:{repo} again")
    return data


def read_file(source: tuple[str, str], path: str, blob_id: str) -> bytes:
    """The bytes of one pinned file (``git show <commit>:<path>``), blob id checked."""
    _object_id(source, path, blob_id)
    return _hash_check(source[0], path, blob_id, _git(source, "cat-file", "blob", blob_id))


def read_tree(source: tuple[str, str], folder: str, tree_id: str) -> dict[str, bytes]:
    """Every file under a pinned folder, in git's (path) order: tree id and each blob id checked."""
    _object_id(source, folder, tree_id)
    listing = _git(source, "ls-tree", "-r", "-z", source[1], folder).split(b"\0")
    rows = [line.split(b"\t", 1) for line in listing if line]
    entries = [(meta.split()[2].decode(), path.decode()) for meta, path in rows]
    batch = _git_batch(source, [blob_id for blob_id, _ in entries])  # one git call, not one per file
    return {path: _hash_check(source[0], path, blob_id, batch[blob_id]) for blob_id, path in entries}


def _git_batch(source: tuple[str, str], ids: list[str]) -> dict[str, bytes]:
    """Read many blobs with one ``git cat-file --batch``."""
    git_dir = MIRROR / source[0].replace("/", "+") / "repo"
    raw = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "--batch"], input="\n".join(ids).encode() + b"\n",
                         capture_output=True, check=True).stdout
    out, pos = {}, 0
    for blob_id in ids:
        end = raw.index(b"\n", pos)
        header = raw[pos:end].split()
        if header[-1] == b"missing":
            sys.exit(f"{source[0]}: blob {blob_id} missing from the snapshot: fetch github:{source[0]} again")
        size = int(header[2])
        out[blob_id] = raw[end + 1:end + 1 + size]
        pos = end + 2 + size
    return out


def hate_speech() -> pd.DataFrame:
    """de Gibert et al. 2018: one sentence a row, in annotations_metadata.csv order; hate / noHate only."""
    raw = read_file(HATE, "annotations_metadata.csv", "353968ab41c209708ca148b6e1dd7043729fb9db")
    meta = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False)
    files = read_tree(HATE, "all_files", "d51c741db0e928ca6bd6662fbc9064943d47fd53")
    keep = meta["label"].isin(["hate", "noHate"])
    for label, n in meta.loc[~keep, "label"].value_counts().items():
        print(f"hate_speech: dropped {n} rows labelled {label!r} (not hate/noHate)")
    meta = meta[keep]
    texts = [files[f"all_files/{file_id}.txt"].decode("utf-8") for file_id in meta["file_id"]]
    return pd.DataFrame({"text": texts, "label": meta["label"].to_numpy()})


def dbpedia() -> pd.DataFrame:
    """The DHIM copy of a DBpedia-14 subset: its test.csv (5,000 rows, content only), classes from meta.txt."""
    meta = read_file(DHIM, "data/dbpedia/meta.txt", "fa7f28e152bc54bbb3f64f5d44e05d31d356d6b6").decode()
    names = dict(re.findall(r"^(\d+): (\w+)$", meta, re.M))
    if set(names.values()) != DBPEDIA_CLASSES:
        sys.exit(f"unexpected DBpedia classes in meta.txt: {sorted(names.values())}")
    data = pd.read_csv(io.BytesIO(read_file(DHIM, "data/dbpedia/test.csv", "87f4e274439b92b66617815eaaac7e780808dd6c")),
                       header=None, names=["class_id", "text"], dtype=str, keep_default_na=False)
    return pd.DataFrame({"text": data["text"], "label": data["class_id"].map(names)})


def folder_texts(name: str, files: dict[str, bytes], depth: int) -> pd.DataFrame:
    """One row per file ``<top>/.../<class>/<file>`` at ``depth`` path parts: the whole file, label = its folder.

    A file is decoded as UTF-8, or as Latin-1 where it is not valid UTF-8 (every byte is then a character);
    the files so decoded are printed. Files at other depths (a README) are skipped.
    """
    rows, latin1 = [], []
    for path, data in files.items():
        parts = path.split("/")
        if len(parts) != depth:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
            latin1.append(path)
        rows.append((text, parts[-2]))
    print(f"{name}: decoded {len(latin1)} file(s) as Latin-1, not UTF-8: {latin1}")
    return pd.DataFrame(rows, columns=["text", "label"])


def bbc_news() -> pd.DataFrame:
    """Greene & Cunningham 2006: each bbc/<class>/NNN.txt whole, in path order (a few are Latin-1: 0xA3 = £)."""
    return folder_texts("bbc_news", read_tree(BBC, "bbc", "ddd147ec1154a686e159140fefe74c96d1713ebe"), depth=3)


def newsgroups() -> pd.DataFrame:
    """20 Newsgroups "bydate", test split: each post whole (its kept headers included), label = its group."""
    folder = "20news-bydate/20news-bydate-test"
    files = read_tree(NEWSGROUPS, folder, "ce8fbde5164cca2e442bfc3ea65e93ea103bfc18")
    data = folder_texts("newsgroups", files, depth=4)
    if data["label"].nunique() != 20 or len(data) != len(files):
        sys.exit(f"unexpected {folder}: {len(files)} files, groups {sorted(data['label'].unique())}")
    return data


def irony() -> pd.DataFrame:
    """TweetEval irony (SemEval-2018 Task 3A), test split: one tweet a line, label named by mapping.txt."""
    folder = "datasets/irony"
    mapping = read_file(TWEETEVAL, f"{folder}/mapping.txt", "7a12d87cdac338a6bda1698a28622db01d622b4e").decode()
    names = dict(line.split("\t") for line in mapping.splitlines() if line.strip())
    texts = read_file(TWEETEVAL, f"{folder}/test_text.txt", "870b1023030bcbb2a6c3a794c7fbe29e890cabad")
    labels = read_file(TWEETEVAL, f"{folder}/test_labels.txt", "c15912c8f1a5103137befdb26668ada8894b60d6")
    texts, labels = texts.decode("utf-8").splitlines(), labels.decode().split()
    if len(texts) != len(labels) or set(labels) != set(names):
        sys.exit(f"unexpected {folder}: {len(texts)} texts, {len(labels)} labels, ids {sorted(set(labels))}")
    return pd.DataFrame({"text": [t.rstrip() for t in texts], "label": [names[i] for i in labels]})


def _clean(sgml: str) -> str:
    """Unescape SGML entities and drop control characters (keeping newlines and tabs)."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", html.unescape(sgml)).strip()


def reuters() -> pd.DataFrame:
    """Reuters-21578, ModApte split (TOPICS="YES", LEWISSPLIT TRAIN/TEST), docs with >= 1 of its 90 topics."""
    _object_id(REUTERS, "reuters21578", "b032441e07ce260ccac7b2b103804741ee72d9e4")
    docs, skipped = [], 0
    for number in range(22):
        path = f"reuters21578/reut2-{number:03d}.sgm"
        blob_id = _git(REUTERS, "rev-parse", f"{REUTERS[1]}:{path}").decode().strip()  # pinned through the tree id
        sgml = _hash_check(REUTERS[0], path, blob_id, _git(REUTERS, "cat-file", "blob", blob_id)).decode("latin-1")
        for attrs, doc in re.findall(r"<REUTERS ([^>]*)>(.*?)</REUTERS>", sgml, re.S):
            attr = dict(re.findall(r'(\w+)="([^"]*)"', attrs))
            if attr["TOPICS"] != "YES" or attr["LEWISSPLIT"] not in ("TRAIN", "TEST"):
                skipped += 1
                continue
            found = {tag: re.search(rf"<{tag}>(.*?)</{tag}>", doc, re.S) for tag in ("TOPICS", "TITLE", "BODY")}
            topics = re.findall(r"<D>(.*?)</D>", found["TOPICS"].group(1)) if found["TOPICS"] else []
            parts = [_clean(found[tag].group(1)) for tag in ("TITLE", "BODY") if found[tag]]
            if not parts:  # TYPE="UNPROC": the text is not split into title and body
                parts = [_clean(re.search(r"<TEXT[^>]*>(.*?)</TEXT>", doc, re.S).group(1))]
            docs.append((attr["LEWISSPLIT"].lower(), topics, "\n".join(p for p in parts if p)))
    print(f"reuters: dropped {skipped} documents outside the ModApte split (LEWISSPLIT NOT-USED or TOPICS != YES)")
    train = {t for split, topics, _ in docs if split == "train" for t in topics}
    modapte = train & {t for split, topics, _ in docs if split == "test" for t in topics}
    kept = [d for d in docs if modapte & set(d[1])]
    no_topic = sum(1 for d in docs if not d[1])
    print(f"reuters: {len(modapte)} ModApte topics (>= 1 train and >= 1 test doc); dropped {no_topic} ModApte "
          f"documents with no topic and {len(docs) - len(kept) - no_topic} whose topics are all outside those")
    freq = pd.Series([t for split, topics, _ in kept if split == "train" for t in topics]).value_counts()
    if set(freq.index[:10]) != set(REUTERS_TOP10):
        sys.exit(f"unexpected top-10 Reuters topics: {list(freq.index[:10])}")
    return pd.DataFrame({"text": [text for *_, text in kept],
                         "labels": ["|".join(t for t in topics if t in REUTERS_TOP10) for _, topics, _ in kept],
                         "split": [split for split, *_ in kept]})


def semeval_ec() -> pd.DataFrame:
    """SemEval-2018 Task 1 E-c English: train, dev and test-gold in that order; 11 emotion 0/1 columns."""
    frames = []
    for split, name, blob_id in [("train", "train", "8ce8853f138c081784d3ad59d393457758425d5a"),
                                 ("dev", "dev", "afc87d1acffaa26870bbc5740d776d71ceed71e4"),
                                 ("test", "test-gold", "5b01ea5b31a6ade1db517d3ac3c559861fb81cc9")]:
        raw = read_file(SEMEVAL, f"datasets/task1/E-c/E-c-En-{name}.txt", blob_id)
        data = pd.read_csv(io.BytesIO(raw), sep="\t", quoting=3, dtype=str, keep_default_na=False)
        if list(data.columns) != ["ID", "Tweet", *EMOTIONS]:
            sys.exit(f"unexpected E-c columns in {name}: {list(data.columns)}")
        labels = ["|".join(e for e in EMOTIONS if row[e] == "1") for _, row in data.iterrows()]
        frames.append(pd.DataFrame({"text": data["Tweet"], "labels": labels, "split": split}))
    return pd.concat(frames, ignore_index=True)


BUILDERS = {"hate_speech": hate_speech, "dbpedia": dbpedia, "bbc_news": bbc_news, "reuters": reuters,
            "semeval_ec": semeval_ec, "newsgroups": newsgroups, "irony": irony}


def _counts(values: pd.Series) -> dict[str, int]:
    """Value counts as a plain dict, most frequent first."""
    return {str(k): int(v) for k, v in values.value_counts().items()}


def summarise(name: str, data: pd.DataFrame) -> None:
    """Print rows, classes (or label frequencies), median characters and duplicate texts."""
    print(f"== {name}: {len(data)} rows, median {data['text'].str.len().median():.0f} chars, "
          f"{data['text'].duplicated().sum()} duplicate texts (kept)")
    if "split" in data:
        print("   split:", _counts(data["split"]))
    if "label" in data:
        print(f"   {data['label'].nunique()} classes:", _counts(data["label"]))
        return
    names = data["labels"].str.split("|").explode()
    print("   label frequencies:", _counts(names[names != ""]))
    print(f"   mean labels per text {(names != '').groupby(level=0).sum().mean():.3f}; "
          f"{(data['labels'] == '').sum()} texts with no label")


def main(names: list[str]) -> None:
    """Build the named sets (all by default) into the cache folder."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in names or list(BUILDERS):
        data = BUILDERS[name]()
        empty = data["text"].str.strip() == ""
        if empty.any():
            print(f"{name}: dropped {empty.sum()} rows with an empty text")
            data = data[~empty].reset_index(drop=True)
        data.to_csv(CACHE / f"{name}.csv", index=False, encoding="utf-8")
        summarise(name, data)
        print(f"   wrote {CACHE / f'{name}.csv'}")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv):
        sys.exit(__doc__)
    main(sys.argv[1:])
