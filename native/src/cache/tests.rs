//! The disk tier on its own: store, revive, identity, stale handling and file safety.

use std::io::Write;

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

/// Chunks 0..4 of `t2m` stored by a writer, and the names of their files.
fn warm(dir: &Path, arrays: &[ArrayIdentity]) -> Vec<String> {
    let t = DiskTier::open(&opts(dir, true), arrays).unwrap();
    (0..4u64)
        .map(|c| {
            t.store(0, c, DType::Float32, &[1, 2], &bytes_of(&[c as f32, 10.0 + c as f32])).unwrap().unwrap();
            t.file_name(0, c)
        })
        .collect()
}

#[test]
fn altered_chunk_files_are_never_served_through_persist_and_readonly_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    let names = warm(d, &arrays);
    let read = |n: &str| std::fs::read(d.join(n)).unwrap();
    // A flipped data byte, in place.
    let mut flipped = read(&names[0]);
    flipped[128 + 2] ^= 0x40;
    std::fs::OpenOptions::new().write(true).open(d.join(&names[0])).unwrap().write_all(&flipped).unwrap();
    // A truncation (a full disk).
    std::fs::OpenOptions::new().write(true).open(d.join(&names[1])).unwrap().set_len(128 + 4).unwrap();
    // Chunk 3's whole, valid file under chunk 2's name.
    std::fs::copy(d.join(&names[3]), d.join(&names[2])).unwrap();
    // A file planted under the valid name of chunk 4, which was never written: an NPY of the
    // right header and size, with a record that checks its own bytes.
    let planted_data = bytes_of(&[666.0, 666.0]);
    let header = npy::header(DType::Float32, &[1, 2]);
    let record = CommitRecord::over(&[&header, &planted_data]);
    let planted = [&header[..], &planted_data, record.as_bytes()].concat();
    let planted_name = names[0].replace("__0.npy", "__4.npy");
    std::fs::write(d.join(&planted_name), &planted).unwrap();
    // As a new process would: nothing this one checked or wrote is taken on trust.
    verified::forget_all();

    let ro = CacheOptions { readonly: true, ..opts(d, false) };
    let tier = DiskTier::open(&ro, &arrays).unwrap();
    for (chunk, file, why) in [
        (0, &names[0], "checksum"),
        (1, &names[1], "length"),
        (2, &names[2], "another chunk's file"),
        (4, &planted_name, "checksum"),
    ] {
        let e = tier.revive(0, chunk, DType::Float32, &[1, 2]).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("not served") && e.contains("persist=True"), "chunk {chunk}: {e}");
        assert!(e.ends_with(&d.join(file).display().to_string()), "the file last: {e}");
    }
    let good = tier.revive(0, 3, DType::Float32, &[1, 2]).unwrap().unwrap();
    assert_eq!(&good[..], &bytes_of(&[3.0, 13.0])[..], "the unaltered chunk is served");
    drop(tier);

    let tier = DiskTier::open(&opts(d, true), &arrays).unwrap();
    for chunk in [0, 1, 2, 4] {
        assert!(tier.revive(0, chunk, DType::Float32, &[1, 2]).unwrap().is_none(), "chunk {chunk} was served");
    }
    assert_eq!(tier.counters().misses, 4);
    // The writer reads them from the store and writes them again: served from then on.
    for chunk in [0, 1, 2, 4] {
        let values = bytes_of(&[chunk as f32, 10.0 + chunk as f32]);
        tier.store(0, chunk, DType::Float32, &[1, 2], &values).unwrap().unwrap();
    }
    drop(tier);
    verified::forget_all();
    let tier = DiskTier::open(&ro, &arrays).unwrap();
    for chunk in [0, 1, 2, 3, 4] {
        let got = tier.revive(0, chunk, DType::Float32, &[1, 2]).unwrap().unwrap();
        assert_eq!(&got[..], &bytes_of(&[chunk as f32, 10.0 + chunk as f32])[..], "chunk {chunk}");
    }
}

#[test]
fn a_file_writable_by_every_user_or_not_a_regular_file_is_not_served() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    let names = warm(d, &arrays);
    std::fs::set_permissions(d.join(&names[0]), std::fs::Permissions::from_mode(0o666)).unwrap();
    // A symbolic link to a valid chunk file under another chunk's name, and a FIFO (which a
    // plain open would wait on forever).
    std::fs::remove_file(d.join(&names[1])).unwrap();
    std::os::unix::fs::symlink(d.join(&names[3]), d.join(&names[1])).unwrap();
    std::fs::remove_file(d.join(&names[2])).unwrap();
    let fifo = std::ffi::CString::new(d.join(&names[2]).display().to_string()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path and nothing else.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    verified::forget_all();
    let ro = CacheOptions { readonly: true, ..opts(d, false) };
    let tier = DiskTier::open(&ro, &arrays).unwrap();
    let e = tier.revive(0, 0, DType::Float32, &[1, 2]).unwrap_err().to_string();
    assert!(e.contains("writable by every user"), "{e}");
    let e = tier.revive(0, 1, DType::Float32, &[1, 2]).unwrap_err().to_string();
    assert!(e.contains("cannot be opened"), "a symbolic link: {e}");
    let e = tier.revive(0, 2, DType::Float32, &[1, 2]).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "a FIFO: {e}");
    assert!(tier.revive(0, 3, DType::Float32, &[1, 2]).unwrap().is_some());
}

#[test]
fn a_folder_writable_by_every_user_is_refused_for_every_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    warm(d, &arrays);
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let shared = CacheOptions { shared: true, ..opts(d, true) };
    let ro = CacheOptions { readonly: true, ..opts(d, false) };
    for o in [opts(d, true), opts(d, false), shared, ro] {
        let e = DiskTier::open(&o, &arrays).unwrap_err().to_string();
        assert!(e.contains("writable by every user") && e.contains("chmod 700"), "{o:?}: {e}");
        assert!(e.ends_with(&d.display().to_string()), "the folder last: {e}");
    }
}

#[test]
fn created_files_and_folders_have_the_documented_modes() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    let modes_in = |d: &Path| -> Vec<(String, u32)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().to_string_lossy().into_owned(), mode(&e.path()))
            })
            .collect();
        v.sort();
        v
    };
    // Modes are set after creation (chmod), so the umask neither widens nor narrows them:
    // under the usual 022 the group's write bits below would otherwise be lost. (The umask is
    // the process's: a test that set it would change the files of the tests beside it.)
    let root = tempfile::tempdir().unwrap();
    let arrays = [ident("t2m", "aaaaaaaaaaaaaaaa")];
    let dir = root.path().join("new/cache");
    let names = warm(&dir, &arrays);
    assert_eq!(mode(&dir), 0o700, "a created folder");
    assert_eq!(mode(&root.path().join("new")), 0o700, "a created parent");
    let want: Vec<(String, u32)> = {
        let mut v = vec![(lock::LOCK_FILE.to_string(), 0o600), (log::LOG_FILE.to_string(), 0o600)];
        v.extend(names.iter().map(|n| (n.clone(), 0o600)));
        v.sort();
        v
    };
    assert_eq!(modes_in(&dir), want);
    // shared_cache in a folder prepared for a group: the group reads chunks, writes the log and locks.
    let group = root.path().join("group");
    std::fs::create_dir(&group).unwrap();
    std::fs::set_permissions(&group, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let t = DiskTier::open(&CacheOptions { shared: true, ..opts(&group, true) }, &arrays).unwrap();
    t.store(0, 0, DType::Float32, &[1, 2], &bytes_of(&[1.0, 2.0])).unwrap().unwrap();
    let name = t.file_name(0, 0);
    drop(t);
    let mut want = vec![
        (".insitu.fillers".to_string(), 0o660),
        (lock::LOCK_FILE.to_string(), 0o660),
        (log::LOG_FILE.to_string(), 0o660),
        (name, 0o640),
    ];
    want.sort();
    assert_eq!(modes_in(&group), want);
    assert_eq!(mode(&group), 0o2770, "a folder the tier did not create keeps its mode");
}
