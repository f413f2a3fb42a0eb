//! Unit tests of [`SimGpu`] (a file of their own to keep `sim.rs` short).

use super::*;
use crate::card::CardSpec;
use crate::layout;

const GIB: u64 = 1 << 30;

fn card(dir: &tempfile::TempDir) -> SimGpu {
    SimGpu::create(dir.path().join("gpu"), "sim0", 16 * GIB).unwrap()
}

#[test]
fn create_then_open_sees_the_same_card() {
    let dir = tempfile::tempdir().unwrap();
    let a = card(&dir);
    a.book(10, "model", GIB).unwrap();
    let b = SimGpu::open(a.path()).unwrap();
    assert_eq!(b.uuid(), a.uuid());
    assert_eq!(b.name(), "sim0");
    assert_eq!(b.total(), 16 * GIB);
    assert_eq!(b.used(), GIB);
    b.book(11, "ctx", GIB / 2).unwrap();
    assert_eq!(a.free(), 16 * GIB - GIB - GIB / 2);
    assert_eq!(a.free_seen_by(11), a.free());
    assert_eq!(a.semantics(), Semantics::DeviceWide);
    assert!(
        dir.path().read_dir().unwrap().count() == 1,
        "temp file left"
    );
}

#[test]
fn create_refuses_an_existing_file_and_open_refuses_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let a = card(&dir);
    assert!(matches!(
        SimGpu::create(a.path(), "x", 1),
        Err(SimError::Exists { .. })
    ));
    let other = dir.path().join("other");
    std::fs::write(&other, vec![0u8; 4096]).unwrap();
    assert!(matches!(
        SimGpu::open(&other),
        Err(SimError::NotACard { .. })
    ));
    assert!(matches!(
        SimGpu::open(dir.path().join("missing")),
        Err(SimError::Open { .. })
    ));
}

#[test]
fn book_sets_add_adjusts_release_drops() {
    let dir = tempfile::tempdir().unwrap();
    let g = card(&dir);
    assert_eq!(g.book(5, "m", 100).unwrap(), 0);
    assert_eq!(g.book(5, "m", 300).unwrap(), 100);
    assert_eq!(g.add(5, "m", -50).unwrap(), 250);
    assert_eq!(g.add(5, "n", 7).unwrap(), 7);
    assert_eq!(g.used_by(5), 257);
    assert!(matches!(
        g.add(5, "n", -8),
        Err(SimError::Underflow { booked: 7, .. })
    ));
    assert_eq!(g.release(5, "m").unwrap(), 250);
    assert_eq!(g.release(5, "m").unwrap(), 0);
    assert_eq!(
        g.bookings(),
        vec![Booking {
            pid: 5,
            tag: "n".into(),
            bytes: 7
        }]
    );
    assert_eq!(g.release_process(5), 7);
    assert_eq!(g.used(), 0);
}

#[test]
fn checked_booking_fails_like_cuda() {
    let dir = tempfile::tempdir().unwrap();
    let g = card(&dir);
    g.book(1, "a", 15 * GIB).unwrap();
    match g.book_checked(2, "b", 2 * GIB) {
        Err(SimError::OutOfMemory {
            requested, free, ..
        }) => {
            assert_eq!((requested, free), (2 * GIB, GIB));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(g.used_by(2), 0);
    assert_eq!(g.bookings().len(), 1);
    g.book_checked(2, "b", GIB).unwrap();
    assert_eq!(g.free(), 0);
    // Unchecked booking may overbook; free reads zero, never wraps.
    g.book(3, "c", GIB).unwrap();
    assert_eq!(g.free(), 0);
    assert_eq!(g.used(), 17 * GIB);
}

#[test]
fn reap_drops_dead_processes_only() {
    let dir = tempfile::tempdir().unwrap();
    let g = card(&dir);
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let me = std::process::id();
    g.book(dead, "m", 10).unwrap();
    g.book(me, "m", 20).unwrap();
    assert_eq!(g.reap(), vec![dead]);
    assert_eq!(g.used(), 20);
    assert_eq!(g.processes(), vec![(me, 20)]);
}

#[test]
fn released_slots_are_recycled_and_a_full_table_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let g = card(&dir);
    let n = layout::SLOT_COUNT as usize;
    for i in 0..2 * n {
        g.book(1, &i.to_string(), 1).unwrap();
        g.release(1, &i.to_string()).unwrap();
    }
    assert_eq!(g.slots_in_use(), 0);
    for i in 0..n {
        g.book(2, &i.to_string(), 1).unwrap();
    }
    assert!(matches!(
        g.book(2, "one more", 1),
        Err(SimError::Full { slots }) if slots == n
    ));
    // Re-booking a key that has a slot still works.
    g.book(2, "0", 5).unwrap();
    assert_eq!(g.release_process(2), n as u64 + 4);
    assert_eq!(g.slots_in_use(), 0);
}

#[test]
fn bad_arguments_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let g = card(&dir);
    assert!(matches!(
        g.book(0, "m", 1),
        Err(SimError::InvalidPid { .. })
    ));
    assert!(matches!(
        g.book(1, &"x".repeat(97), 1),
        Err(SimError::TagTooLong { len: 97, .. })
    ));
    assert!(matches!(
        g.book(1, "m", 1 << 48),
        Err(SimError::TooLarge { .. })
    ));
    let spec = CardSpec {
        uuid: Some("nope".into()),
        ..CardSpec::new("x", 1)
    };
    assert!(matches!(
        SimGpu::create_with(dir.path().join("u"), &spec),
        Err(SimError::InvalidUuid { .. })
    ));
}
