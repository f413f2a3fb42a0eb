//! Unit tests of the booking table (a file of their own to keep `table.rs` short).

use super::*;
use crate::layout::SLOT_COUNT;

fn table(total: u64) -> (Box<Header>, Vec<Slot>) {
    let h = Box::new(Header::new(0, (0, 0, 0), total, "t", "GPU-t"));
    let slots = (0..SLOT_COUNT).map(|_| Slot::default()).collect();
    (h, slots)
}

#[test]
fn a_key_has_one_slot_under_contention() {
    let (h, slots) = table(u64::MAX);
    let t = Table {
        header: &h,
        slots: &slots,
    };
    std::thread::scope(|s| {
        for n in 0..4u64 {
            let t = &t;
            s.spawn(move || {
                for k in 0..200u64 {
                    let tag = format!("m{}", k % 5);
                    t.update(7, &tag, None, |_| Ok(1 + (k + n) % 3)).unwrap();
                    if k % 7 == 0 {
                        t.update(7, &tag, None, |_| Ok(0)).unwrap();
                    }
                }
            });
        }
    });
    let b = t.bookings();
    let mut tags: Vec<_> = b.iter().map(|(_, tag, _)| tag.clone()).collect();
    tags.sort();
    tags.dedup();
    assert_eq!(tags.len(), b.len(), "duplicate slots: {b:?}");
    let sum: u64 = b.iter().map(|x| x.2).sum();
    assert_eq!(h.used.load(SeqCst), sum);
    assert!(slots.iter().all(|s| matches!(
        state::kind(s.state.load(SeqCst)),
        state::EMPTY | state::LIVE
    )));
}

#[test]
fn stuck_transition_of_a_dead_process_is_undone() {
    let (h, slots) = table(100);
    let t = Table {
        header: &h,
        slots: &slots,
    };
    // pid_max is at most 2^22, so this actor cannot exist.
    let dead = (1 << 22) + 5;
    slots[0]
        .state
        .store(state::make(state::PENDING, dead, 9), SeqCst);
    Table::write_tag(&slots[0], &TagKey::new("x").unwrap());
    t.update(9, "x", None, |_| Ok(5)).unwrap();
    assert_eq!(t.bookings(), vec![(9, "x".to_owned(), 5)]);
}
