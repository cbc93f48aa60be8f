//! The disk tier on its own: store, revive, identity, stale handling and file safety.

use super::*;

fn ident(path: &str, fingerprint: &str) -> ArrayIdentity {
    ArrayIdentity { path: path.into(), fingerprint: fingerprint.into(), dtype: DType::Float32, inner: vec![2] }
}

fn opts(dir: &Path, persist: bool) -> CacheOptions {
    CacheOptions { dir: dir.to_path_buf(), persist, ..CacheOptions::default() }
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

#[test]
fn persisted_chunks_revive_in_a_new_opener_aligned_and_exact() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa"), ident("u10", "bbbbbbbbbbbbbbbb")];
    let data = bytes_of(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    {
        let tier = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
        let mapped = tier.store(1, 7, DType::Float32, &[3, 2], &data).unwrap().unwrap();
        assert_eq!(&mapped[..], &data[..]);
        assert_eq!(mapped.as_ptr() as usize % 128, 0, "mapped chunk data is 128-byte aligned");
        assert_eq!(tier.counters().stored, 1);
    }
    let tier = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
    let got = tier.revive(1, 7, DType::Float32, &[3, 2]).unwrap().unwrap();
    assert_eq!(&got[..], &data[..]);
    assert_eq!(got.as_ptr() as usize % 128, 0);
    assert!(tier.revive(0, 7, DType::Float32, &[3, 2]).unwrap().is_none(), "another array's chunk is a miss");
    assert!(tier.revive(1, 7, DType::Float32, &[2, 2]).unwrap().is_none(), "another shape is a miss");
    assert_eq!(tier.counters(), TierCounters { revived: 1, stored: 0, misses: 2 });
    // The file is ordinary NPY.
    let file = dir.path().join("u10__bbbbbbbbbbbbbbbb__7.npy");
    assert!(std::fs::read(file).unwrap().starts_with(b"\x93NUMPY"));
}

#[test]
fn spill_without_persist_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let tier = DiskTier::open(&opts(dir.path(), false), &[ident("t2m", "aaaaaaaaaaaaaaaa")]).unwrap();
    let data = bytes_of(&[1.0, 2.0]);
    let mapped = tier.store(0, 0, DType::Float32, &[1, 2], &data).unwrap().unwrap();
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names, [lock::LOCK_FILE], "only the lockfile: the spill file is unlinked once mapped");
    assert_eq!(&mapped[..], &data[..], "the unlinked mapping still reads");
    assert!(tier.revive(0, 0, DType::Float32, &[1, 2]).unwrap().is_none(), "spill never revives");
}

#[test]
fn changed_pipeline_is_stale_per_array_and_reset_drops_only_that_array() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes_of(&[1.0, 2.0]);
    {
        let tier = DiskTier::open(
            &opts(dir.path(), true),
            &[ident("t2m", "1111111111111111"), ident("u10", "2222222222222222")],
        )
        .unwrap();
        tier.store(0, 0, DType::Float32, &[1, 2], &data).unwrap();
        tier.store(1, 0, DType::Float32, &[1, 2], &data).unwrap();
    }
    let changed = [ident("t2m", "9999999999999999"), ident("u10", "2222222222222222")];
    let e = DiskTier::open(&opts(dir.path(), true), &changed).unwrap_err().to_string();
    assert!(e.contains("[\"t2m\"]") && e.contains("stale") && e.contains("reset_stale_cache=True"), "{e}");
    // Reading a subset that leaves t2m out is not stale, and leaves its files alone.
    drop(DiskTier::open(&opts(dir.path(), true), &[ident("u10", "2222222222222222")]).unwrap());
    assert!(dir.path().join("t2m__1111111111111111__0.npy").exists());
    // A new array is cold, not stale.
    drop(DiskTier::open(&opts(dir.path(), true), &[ident("v10", "3333333333333333")]).unwrap());
    let reset = CacheOptions { reset_stale: true, ..opts(dir.path(), true) };
    let tier = DiskTier::open(&reset, &changed).unwrap();
    assert!(!dir.path().join("t2m__1111111111111111__0.npy").exists(), "the stale array's file is deleted");
    assert!(tier.revive(1, 0, DType::Float32, &[1, 2]).unwrap().is_some(), "u10 kept its chunk");
    assert!(tier.revive(0, 0, DType::Float32, &[1, 2]).unwrap().is_none());
    drop(tier);
    // The reset was written back: a plain reopen is not stale again.
    drop(DiskTier::open(&opts(dir.path(), true), &changed).unwrap());
}

#[test]
fn readonly_writes_nothing_and_a_miss_names_the_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    let data = bytes_of(&[1.0, 2.0]);
    drop({
        let t = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
        t.store(0, 0, DType::Float32, &[1, 2], &data).unwrap();
        t
    });
    let snapshot = |d: &Path| -> Vec<(String, std::time::SystemTime, u64)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                (e.file_name().to_string_lossy().into(), m.modified().unwrap(), m.len())
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(dir.path());
    let ro = CacheOptions { readonly: true, ..opts(dir.path(), false) };
    let tier = DiskTier::open(&ro, &arrays).unwrap();
    assert!(tier.revive(0, 0, DType::Float32, &[1, 2]).unwrap().is_some());
    let e = tier.revive(0, 5, DType::Float32, &[1, 2]).unwrap_err().to_string();
    assert!(e.contains("chunk 5 of array \"t2m\"") && e.contains("readonly_cache=True"), "{e}");
    assert!(tier.store(0, 5, DType::Float32, &[1, 2], &data).unwrap().is_none());
    drop(tier);
    assert_eq!(snapshot(dir.path()), before, "a read-only opener changed the directory");
    let both = CacheOptions { reset_stale: true, ..ro.clone() };
    assert!(DiskTier::open(&both, &arrays).unwrap_err().to_string().contains("contradict"));
    let missing = CacheOptions { dir: dir.path().join("nope"), ..ro };
    assert!(DiskTier::open(&missing, &arrays).unwrap_err().to_string().contains("does not exist"));
}

#[test]
fn a_replaced_file_does_not_change_an_existing_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    let old = bytes_of(&[1.0, 2.0]);
    let held = {
        let t = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
        t.store(0, 0, DType::Float32, &[1, 2], &old).unwrap().unwrap()
    };
    // A later writer re-admits the same chunk with other bytes.
    let t = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
    t.store(0, 0, DType::Float32, &[1, 2], &bytes_of(&[7.0, 8.0])).unwrap();
    assert_eq!(&held[..], &old[..], "the earlier mapping kept its inode");
    assert_eq!(&t.revive(0, 0, DType::Float32, &[1, 2]).unwrap().unwrap()[..], &bytes_of(&[7.0, 8.0])[..]);
}

#[test]
fn damaged_or_missing_files_are_misses_and_temp_files_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    drop({
        let t = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
        t.store(0, 0, DType::Float32, &[1, 2], &bytes_of(&[1.0, 2.0])).unwrap();
        t.store(0, 1, DType::Float32, &[1, 2], &bytes_of(&[3.0, 4.0])).unwrap();
        t
    });
    std::fs::write(dir.path().join("t2m__aaaaaaaaaaaaaaaa__0.npy"), b"short").unwrap();
    std::fs::remove_file(dir.path().join("t2m__aaaaaaaaaaaaaaaa__1.npy")).unwrap();
    std::fs::write(dir.path().join("x.npy.999.insitu-tmp"), b"left by a crash").unwrap();
    let t = DiskTier::open(&opts(dir.path(), true), &arrays).unwrap();
    assert!(!dir.path().join("x.npy.999.insitu-tmp").exists(), "a writer sweeps temp files");
    assert!(t.revive(0, 0, DType::Float32, &[1, 2]).unwrap().is_none());
    assert!(t.revive(0, 1, DType::Float32, &[1, 2]).unwrap().is_none());
    assert_eq!(t.counters().misses, 2);
}

#[test]
fn fillers_find_what_another_wrote_since_they_opened_and_write_each_chunk_once() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    let shared = CacheOptions { shared: true, ..opts(dir.path(), true) };
    let a = DiskTier::open(&shared, &arrays).unwrap();
    let b = DiskTier::open(&shared, &arrays).unwrap();
    assert!(b.describe().ends_with("[persist, shared with other processes (shared lock)]"));
    let data = bytes_of(&[1.0, 2.0]);
    assert!(b.revive(0, 0, DType::Float32, &[1, 2]).unwrap().is_none());
    a.store(0, 0, DType::Float32, &[1, 2], &data).unwrap().unwrap();
    // b opened before a wrote it: b finds it by name.
    assert_eq!(&b.revive(0, 0, DType::Float32, &[1, 2]).unwrap().unwrap()[..], &data[..]);
    // b had read it too: its copy does not replace a's file, and is not logged again.
    use std::os::unix::fs::MetadataExt;
    let path = dir.path().join("t2m__aaaaaaaaaaaaaaaa__0.npy");
    let inode = std::fs::metadata(&path).unwrap().ino();
    assert_eq!(&b.store(0, 0, DType::Float32, &[1, 2], &data).unwrap().unwrap()[..], &data[..]);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "a valid chunk file was replaced");
    let logged = log::load(&dir.path().join(log::LOG_FILE)).unwrap().entries;
    assert_eq!(logged.len(), 1, "{logged:?}");
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert!(!names.iter().any(|n| n.ends_with(".insitu-tmp")), "a temporary file was left: {names:?}");
    // A reset needs the directory alone.
    let reset = CacheOptions { reset_stale: true, ..shared.clone() };
    let changed = [ident("t2m", "bbbbbbbbbbbbbbbb")];
    let e = DiskTier::open(&reset, &changed).unwrap_err().to_string();
    assert!(e.contains("other processes sharing this cache"), "{e}");
    drop((a, b));
    drop(DiskTier::open(&reset, &changed).unwrap());
    assert!(!path.exists(), "alone, the reset deletes the stale array's file");
    assert!(CacheOptions { persist: false, ..shared }.validate().unwrap_err().to_string().contains("needs persist"));
}
