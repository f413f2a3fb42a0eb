//! Unit tests of the pool (a file of their own to keep `pool.rs` short).

use super::*;
use crate::segment::read_at;
use crate::settings::PeerLimits;

fn pool() -> Pool {
    Pool::new(PoolConfig {
        name: "airlock-test".into(),
        min_segment: 4 << 20,
        keep_idle: 8 << 20,
        limit: 64 << 20,
        max_segments: 4,
        peer: PeerLimits::default(),
    })
}

#[test]
fn a_region_is_reused_only_after_release() {
    let mut p = pool();
    let a = p.alloc(1 << 20).unwrap();
    assert_eq!(a.created, Some(0));
    let b = p.alloc(1 << 20).unwrap();
    assert_eq!(b.created, None, "second lease fits the first segment");
    assert_ne!(a.lease.offset, b.lease.offset);
    assert_eq!(
        p.release(a.lease.segment, a.lease.offset).unwrap(),
        Released::Freed
    );
    let c = p.alloc(1 << 20).unwrap();
    assert_eq!(c.lease, a.lease, "the freed region is reused");
}

#[test]
fn extra_holds_delay_the_free() {
    let mut p = pool();
    let a = p.alloc(100).unwrap().lease;
    p.acquire(a.segment, a.offset).unwrap();
    assert_eq!(p.release(a.segment, a.offset).unwrap(), Released::StillHeld);
    assert_eq!(p.release(a.segment, a.offset).unwrap(), Released::Freed);
    assert!(matches!(
        p.release(a.segment, a.offset),
        Err(ShmError::UnknownRegion { .. })
    ));
}

#[test]
fn forged_release_is_refused() {
    let mut p = pool();
    let a = p.alloc(100).unwrap().lease;
    assert!(p.release(a.segment, a.offset + 64).is_err());
    assert!(p.release(a.segment + 7, 0).is_err());
    assert_eq!(p.stats().leased_regions, 1);
}

#[test]
fn idle_segments_beyond_keep_are_retired() {
    let mut p = pool();
    let big = p.alloc(16 << 20).unwrap().lease;
    p.release(big.segment, big.offset).unwrap();
    assert_eq!(p.take_retired(), vec![big.segment]);
    assert_eq!(p.stats().segments, 0);
}

#[test]
fn writes_land_in_the_segment_and_only_in_leased_regions() {
    let mut p = pool();
    let a = p.alloc(8).unwrap().lease;
    let src = [1u8, 2, 3, 4, 5, 6, 7, 8];
    unsafe { p.write(a.segment, a.offset, src.as_ptr(), 8).unwrap() };
    let ptr = p.region_ptr(a.segment, a.offset, 8).unwrap();
    assert_eq!(unsafe { std::slice::from_raw_parts(ptr, 8) }, &src);
    assert!(
        p.region_ptr(a.segment, a.offset, 1 << 20).is_err(),
        "past the lease"
    );
    assert!(
        p.region_ptr(a.segment, a.offset + 64, 8).is_err(),
        "not a lease"
    );
}

#[test]
fn limit_is_enforced() {
    let mut p = pool();
    assert!(matches!(p.alloc(65 << 20), Err(ShmError::PoolLimit { .. })));
}

#[test]
fn release_all_frees_everything() {
    let mut p = pool();
    for _ in 0..5 {
        p.alloc(300_000).unwrap();
    }
    p.release_all();
    assert_eq!(p.stats().leased_regions, 0);
    let again = p.alloc(4 << 20).unwrap();
    assert_eq!(again.created, None, "coalesced back into one free range");
}

#[test]
fn release_all_keeps_leases_not_yet_sent_and_their_segment() {
    // keep_idle 0: any idle segment would be retired (unmapped) at once.
    let mut p = Pool::new(PoolConfig {
        name: "airlock-test".into(),
        min_segment: 4 << 20,
        keep_idle: 0,
        limit: 64 << 20,
        max_segments: 4,
        peer: PeerLimits::default(),
    });
    let sent = p.alloc(100).unwrap().lease;
    let filling = p.alloc(8 << 20).unwrap().lease;
    p.release_all_except(&[(filling.segment, filling.offset)]);
    assert_eq!(p.stats().leased_regions, 1);
    assert!(
        p.region_ptr(filling.segment, filling.offset, 8 << 20)
            .is_ok()
    );
    assert!(
        p.release(sent.segment, sent.offset).is_err(),
        "already freed"
    );
    p.release(filling.segment, filling.offset).unwrap();
    assert_eq!(p.stats().segments, 0, "idle at last, and retired");
}

#[test]
fn segment_count_is_capped() {
    let mut p = pool(); // at most 4 segments of 4 MiB
    let held: Vec<Lease> = (0..4).map(|_| p.alloc(4 << 20).unwrap().lease).collect();
    assert!(matches!(
        p.alloc(4 << 20),
        Err(ShmError::SegmentLimit { limit: 4, .. })
    ));
    // An idle segment is retired to make room rather than refusing.
    p.release(held[0].segment, held[0].offset).unwrap();
    assert!(p.alloc(5 << 20).is_ok());
}

#[test]
fn frozen_and_plain_leases_never_share_a_segment() {
    let mut p = pool();
    let plain = p.alloc(4096).unwrap();
    let kept = p.alloc_frozen(4096).unwrap();
    assert_ne!(plain.lease.segment, kept.lease.segment);
    assert!(p.segment(kept.lease.segment).unwrap().is_frozen());
    assert!(!p.segment(plain.lease.segment).unwrap().is_frozen());
    // Each kind reuses its own free space.
    let kept2 = p.alloc_frozen(4096).unwrap();
    assert_eq!(kept2.lease.segment, kept.lease.segment);
    assert!(kept2.created.is_none());
    // Copies into a frozen region go through the pool's own mapping.
    let src = [5u8; 16];
    unsafe {
        p.write(kept.lease.segment, kept.lease.offset, src.as_ptr(), 16)
            .unwrap()
    };
}

#[test]
fn trim_retires_every_idle_segment_and_frees_its_pages() {
    let mut p = pool();
    let a = p.alloc(3 << 20).unwrap(); // a 4 MiB segment
    let c = p.alloc(5 << 20).unwrap(); // a 6 MiB one
    assert_ne!(a.lease.segment, c.lease.segment);
    let fd = p
        .segment(c.lease.segment)
        .unwrap()
        .fd()
        .try_clone_to_owned()
        .unwrap();
    p.release(c.lease.segment, c.lease.offset).unwrap();
    assert_eq!(p.stats().segments, 2, "within keep_idle");
    let freed = p.trim();
    assert_eq!(
        freed,
        6 << 20,
        "the idle segment went, the one with a lease stayed"
    );
    assert_eq!(p.take_retired(), vec![c.lease.segment]);
    assert_eq!(p.stats().segments, 1);
    // The peer's descriptor (still open) now holds no memory.
    let st = rustix::fs::fstat(&fd).unwrap();
    assert_eq!(st.st_blocks, 0);
    assert_eq!(p.trim(), 0);
}

#[test]
fn a_trimmed_segment_still_in_use_keeps_its_bytes_and_takes_copies() {
    let mut p = pool();
    let a = p.alloc(4096).unwrap();
    let src = [9u8; 4096];
    unsafe { p.write(a.lease.segment, a.lease.offset, src.as_ptr(), 4096) }.unwrap();
    assert_eq!(p.trim(), 0, "a region is leased: the segment stays");
    // The bytes the peer views are still there, and a new lease is copied into as before.
    let seg = p.segment(a.lease.segment).unwrap();
    let mut back = [0u8; 4096];
    read_at(seg.fd(), seg.len(), a.lease.offset, &mut back).unwrap();
    assert_eq!(back, src);
    let b = p.alloc(4096).unwrap();
    unsafe { p.write(b.lease.segment, b.lease.offset, src.as_ptr(), 4096) }.unwrap();
    let seg = p.segment(b.lease.segment).unwrap();
    read_at(seg.fd(), seg.len(), b.lease.offset, &mut back).unwrap();
    assert_eq!(back, src);
}
