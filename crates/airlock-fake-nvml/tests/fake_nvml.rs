//! The NVML reader (`airlock_device::Nvml`) through real FFI, against this crate's library and
//! cards booked on by several processes.
//!
//! Cargo builds the package's cdylib before its tests, next to the test executable's `deps/`,
//! so the library found there is always the current one. Each scenario runs in a child (this
//! binary again, the `child` test with `AIRLOCK_TEST_ROLE` set) because the fake reads
//! `AIRLOCK_SIM_GPU` at init and the dynamic linker reads `LD_LIBRARY_PATH` at start: the
//! environment is set per child, never mutated in a running test.

use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_device::{
    DeviceTruth, MemoryInfo, NVML_LIBRARY, NVML_LIBRARY_ENV, Nvml, NvmlError, ProcessMemory,
    resolve_device,
};
use airlock_sim::{CardSpec, SIM_GPU_ENV, Semantics, SimGpu, paths_from_env};

const ROLE: &str = "AIRLOCK_TEST_ROLE";
const LIBRARY: &str = "AIRLOCK_TEST_LIBRARY";
const EXPECT_USED: &str = "AIRLOCK_TEST_EXPECT_USED";
const OBSERVER: &str = "AIRLOCK_TEST_OBSERVER";
/// Printed by a child that ran its role to the end.
const DONE: &str = "airlock-test-role-done";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// `libairlock_fake_nvml.so`, built by cargo with this test.
fn fake_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libairlock_fake_nvml.so"))
        .find(|p| p.exists())
        .expect("cargo builds libairlock_fake_nvml.so before this test")
}

/// Runs the `child` test in a new process with `role` and `env`; panics with its output if it
/// fails.
fn run_child(role: &str, env: &[(&str, &str)], remove: &[&str]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(LIBRARY, fake_library());
    for k in remove {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("{DONE} {role}")),
        "child {role} failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn joined(cards: &[&SimGpu]) -> String {
    std::env::join_paths(cards.iter().map(|c| c.path()))
        .unwrap()
        .into_string()
        .unwrap()
}

/// The children's side; does nothing in a normal test run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let library = PathBuf::from(std::env::var(LIBRARY).unwrap());
    match role.as_str() {
        "book" => {
            // A worker: books its own pid on the card it was handed.
            let card = SimGpu::from_env().unwrap().unwrap();
            let me = std::process::id();
            let n: u64 = std::env::var("AIRLOCK_TEST_N").unwrap().parse().unwrap();
            card.book(me, "model", n * GIB).unwrap();
            card.book(me, "ctx", 300 * MIB).unwrap();
        }
        "read" => read_and_compare(&library),
        "read-wddm" => {
            // NVML tells the truth on a WDDM card, where the observer's own reading does not,
            // and accounts no process's memory.
            let nvml = Nvml::open_at(&library).unwrap();
            let card = SimGpu::from_env().unwrap().unwrap();
            let observer: u32 = std::env::var(OBSERVER).unwrap().parse().unwrap();
            let m = nvml.device_by_uuid(&card.uuid()).unwrap().memory().unwrap();
            assert_eq!((m.total, m.used, m.free), (16 * GIB, 12 * GIB, 4 * GIB));
            assert_eq!(card.free_seen_by(observer), 16 * GIB, "blind");
            let procs = nvml.device(0).unwrap().processes().unwrap().unwrap();
            assert_eq!(procs.len(), 2);
            assert!(procs.iter().all(|p| p.used.is_none()), "{procs:?}");
            // The bridge's reading: the host's and a worker's device resolve to one UUID
            // (torch spells it without the prefix), whose truth NVML gives.
            let bare = card.uuid().trim_start_matches("GPU-").to_owned();
            let uuid = resolve_device(&bare, [("pack-a", card.uuid().as_str())]).unwrap();
            let truth = DeviceTruth::with(Nvml::open_at(&library), &uuid).unwrap();
            assert!(truth.available());
            assert_eq!(truth.memory().unwrap(), Some(m));
            card.book(observer, "more", GIB).unwrap();
            assert_eq!(truth.memory().unwrap().unwrap().free, 3 * GIB, "read live");
            card.release(observer, "more").unwrap();
            // NVML that answers but lacks the device is an error, not a fallback.
            let other = "GPU-ffffffff-0000-0000-0000-000000000000";
            assert!(matches!(
                DeviceTruth::with(Nvml::open_at(&library), other),
                Err(NvmlError::NoDevice { .. })
            ));
        }
        "absent" => {
            let e = Nvml::open_at(&library).unwrap_err();
            match &e {
                NvmlError::Init { code, .. } => {
                    assert_eq!(code.name(), "NVML_ERROR_DRIVER_NOT_LOADED");
                    assert_eq!(code.message, "Driver Not Loaded");
                }
                other => panic!("{other}"),
            }
            assert!(e.is_unavailable());
            // No driver: the truth reads None and callers use upstream's semantics.
            let truth = DeviceTruth::with(Nvml::open_at(&library), "GPU-0").unwrap();
            assert!(!truth.available());
            assert_eq!(truth.memory().unwrap(), None);
        }
        "by-name" => {
            let nvml = Nvml::open().unwrap();
            assert_eq!(nvml.library(), NVML_LIBRARY);
            assert_eq!(nvml.device_count().unwrap(), 1);
        }
        "env-override" => {
            let nvml = Nvml::open().unwrap();
            assert_eq!(Path::new(nvml.library()), library);
            assert_eq!(nvml.device_count().unwrap(), 1);
        }
        other => panic!("unknown role {other}"),
    }
    println!("{DONE} {role}");
}

/// NVML over the fake reports exactly what the cards in `AIRLOCK_SIM_GPU` hold, and follows
/// them live.
fn read_and_compare(library: &Path) {
    let nvml = Nvml::open_at(library).unwrap();
    let cards: Vec<SimGpu> = paths_from_env()
        .iter()
        .map(|p| SimGpu::open(p).unwrap())
        .collect();
    let expect: Vec<u64> = std::env::var(EXPECT_USED)
        .unwrap()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nvml.device_count().unwrap() as usize, cards.len());
    for (i, card) in cards.iter().enumerate() {
        let dev = nvml.device(i as u32).unwrap();
        assert_eq!(dev.uuid().unwrap(), card.uuid());
        assert_eq!(dev.name().unwrap(), card.name());
        let want = MemoryInfo {
            total: card.total(),
            free: card.free(),
            used: expect[i],
        };
        assert_eq!(card.used(), expect[i]);
        assert_eq!(dev.memory().unwrap(), want);
        let procs: Vec<ProcessMemory> = card
            .processes()
            .into_iter()
            .map(|(pid, used)| ProcessMemory {
                pid,
                used: Some(used),
            })
            .collect();
        assert_eq!(dev.processes().unwrap(), Some(procs));
        // By UUID, in NVML's spelling and in torch's.
        let bare = card.uuid().trim_start_matches("GPU-").to_owned();
        for u in [card.uuid(), bare] {
            let by = nvml.device_by_uuid(&u).unwrap();
            assert_eq!(by.info().unwrap(), dev.info().unwrap());
        }
    }
    assert!(matches!(
        nvml.device_by_uuid("GPU-ffffffff-0000-0000-0000-000000000000"),
        Err(NvmlError::NoDevice { .. })
    ));
    // This process books too: the same handle sees it at once, nothing is cached.
    let dev = nvml.device_by_uuid(&cards[0].uuid()).unwrap();
    let before = dev.memory().unwrap();
    cards[0].book(std::process::id(), "reader", GIB).unwrap();
    let after = dev.memory().unwrap();
    assert_eq!(after.used, before.used + GIB);
    assert_eq!(after.free, before.free - GIB);
    let me = dev
        .processes()
        .unwrap()
        .unwrap()
        .into_iter()
        .find(|p| p.pid == std::process::id());
    assert_eq!(me.and_then(|p| p.used), Some(GIB));
    cards[0].release_process(std::process::id());
}

#[test]
fn nvml_reports_what_processes_booked_on_the_simulated_cards() {
    let dir = tempfile::tempdir().unwrap();
    let a = SimGpu::create_with(
        dir.path().join("a"),
        &CardSpec {
            uuid: Some("GPU-5a1c0b2e-0000-4000-8000-00000000000a".into()),
            ..CardSpec::new("NVIDIA Simulated A", 16 * GIB)
        },
    )
    .unwrap();
    let b = SimGpu::create(dir.path().join("b"), "NVIDIA Simulated B", 8 * GIB).unwrap();
    let a_path = a.path().to_str().unwrap();
    for n in 1..=3 {
        run_child(
            "book",
            &[(SIM_GPU_ENV, a_path), ("AIRLOCK_TEST_N", &n.to_string())],
            &[],
        );
    }
    b.book(std::process::id(), "host-model", 2 * GIB).unwrap();
    assert_eq!(a.processes().len(), 3);
    let used_a = 6 * GIB + 3 * 300 * MIB;
    let used_b = 2 * GIB;
    assert_eq!(a.used(), used_a);
    let expect = format!("{used_a},{used_b}");
    run_child(
        "read",
        &[(SIM_GPU_ENV, &joined(&[&a, &b])), (EXPECT_USED, &expect)],
        &[],
    );
    // A worker's bookings go when it is released; NVML follows.
    let first = a.processes()[0].0;
    a.release_process(first);
    let expect = format!("{},{used_b}", a.used());
    run_child(
        "read",
        &[(SIM_GPU_ENV, &joined(&[&a, &b])), (EXPECT_USED, &expect)],
        &[],
    );
}

#[test]
fn on_a_wddm_card_nvml_reports_the_truth_the_processes_do_not_see() {
    let dir = tempfile::tempdir().unwrap();
    let card = SimGpu::create_with(
        dir.path().join("gpu"),
        &CardSpec::new("NVIDIA Simulated WDDM", 16 * GIB).with_semantics(Semantics::WDDM),
    )
    .unwrap();
    let me = std::process::id();
    card.attach(me).unwrap();
    card.book(me, "ctx", 1).unwrap();
    card.book(12345, "model", 12 * GIB - 1).unwrap();
    run_child(
        "read-wddm",
        &[
            (SIM_GPU_ENV, card.path().to_str().unwrap()),
            (OBSERVER, &me.to_string()),
        ],
        &[],
    );
}

#[test]
fn without_a_card_init_fails_like_a_machine_without_the_driver() {
    run_child("absent", &[], &[SIM_GPU_ENV]);
}

#[test]
fn the_fake_is_found_by_the_drivers_name_or_the_override() {
    let dir = tempfile::tempdir().unwrap();
    let card = SimGpu::create(dir.path().join("gpu"), "sim0", GIB).unwrap();
    let libdir = dir.path().join("lib");
    std::fs::create_dir(&libdir).unwrap();
    std::os::unix::fs::symlink(fake_library(), libdir.join(NVML_LIBRARY)).unwrap();
    let card_path = card.path().to_str().unwrap();
    run_child(
        "by-name",
        &[
            (SIM_GPU_ENV, card_path),
            ("LD_LIBRARY_PATH", libdir.to_str().unwrap()),
        ],
        &[NVML_LIBRARY_ENV],
    );
    let lib = fake_library();
    run_child(
        "env-override",
        &[
            (SIM_GPU_ENV, card_path),
            (NVML_LIBRARY_ENV, lib.to_str().unwrap()),
        ],
        &[],
    );
}
