# The data every filesystem scenario writes and reads back: a few thousand
# small files and one large file, pseudo-random (so neither zero detection
# nor compression can hide a lost block), packed as one tar so the guest
# reads it over 9p in one stream. Sourced. Sets DATASET (the tar) and
# MANIFEST (md5sum lines relative to the tar's root).

DATASET_FILES=${LAB_FILES:-2000}
DATASET_BIG_MIB=${LAB_BIG_MIB:-32}

dataset_prepare() {
    # Named after its parameters and this generator, so either changing
    # makes a new one.
    gen=$(sha256sum "$VM_DIR/lib/dataset.sh" | cut -c1-8)
    d=$VM_CACHE/dataset-$DATASET_FILES-$DATASET_BIG_MIB-$gen
    DATASET=$d/data.tar
    MANIFEST=$d/manifest.md5
    [ -f "$d/.done" ] && return 0
    rm -rf "$VM_CACHE"/dataset-*
    say "generating the dataset ($DATASET_FILES files + ${DATASET_BIG_MIB} MiB)"
    rm -rf "$d"
    mkdir -p "$d/tree"
    /usr/bin/python3 - "$d/tree" "$DATASET_FILES" "$DATASET_BIG_MIB" <<'PY' || die "dataset generation failed"
import os, random, sys
root, nfiles, big_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(20261122)           # fixed seed: the same data every run
for i in range(nfiles):
    sub = os.path.join(root, "small", "d%02d" % (i % 50))
    os.makedirs(sub, exist_ok=True)
    # Mostly sub-block files, some spanning several blocks, a few empty.
    size = rnd.choice((0, rnd.randint(1, 4096), rnd.randint(1, 4096), rnd.randint(4097, 24576)))
    with open(os.path.join(sub, "f%05d" % i), "wb") as f:
        f.write(rnd.randbytes(size))
with open(os.path.join(root, "big.bin"), "wb") as f:
    for _ in range(big_mib):
        f.write(rnd.randbytes(1 << 20))
PY
    (cd "$d/tree" && find . -type f | sort | xargs md5sum) >"$MANIFEST.tmp" &&
        (cd "$d/tree" && tar -cf "$DATASET" .) || die "packing the dataset failed"
    mv "$MANIFEST.tmp" "$MANIFEST"
    rm -rf "$d/tree"
    touch "$d/.done"
}
