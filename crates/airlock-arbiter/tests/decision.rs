//! The executor and the policy on hand-made cases.

#![cfg(not(loom))]

mod common;

use airlock_arbiter::{ArbiterError, Refusal, free_room, order, plan};
use common::{FakeCard, cand, key};

#[test]
fn never_evicts_when_free_already_suffices() {
    let cands = vec![cand("a", 1, 10, 0.0), cand("b", 2, 10, 0.0)];
    let mut card = FakeCard::new(50, &cands);
    let out = free_room(50, &cands, &mut card).unwrap();
    assert!(out.satisfied);
    assert!(out.steps.is_empty());
    assert!(card.asked.is_empty());
    assert_eq!(card.reads, 1, "one read of the truth, nothing else");
    assert_eq!((out.free_before, out.free_after), (50, 50));
}

#[test]
fn idle_workers_first_then_least_recently_used_requester_last() {
    let mut busy_old = cand("busy", 1, 1, 1.0);
    busy_old.owner_idle = false;
    let idle_new = cand("idle", 2, 1, 9.0);
    let idle_old = cand("idle", 3, 1, 2.0);
    let mut mine_oldest = cand("me", 4, 1, 0.0);
    mine_oldest.owner_is_requester = true;
    mine_oldest.owner_idle = false;
    let mut busy_new = cand("busy", 5, 1, 5.0);
    busy_new.owner_idle = false;
    let mut in_use = cand("busy", 6, 1, 0.0);
    in_use.in_use = true;
    let empty = cand("idle", 7, 0, 0.0);
    let cands = vec![
        busy_old,
        idle_new,
        idle_old,
        mine_oldest,
        busy_new,
        in_use,
        empty,
    ];
    assert_eq!(order(&cands), vec![2, 1, 0, 4, 3]);

    // Executed: everything evictable goes, in that order, and the in-use model stays.
    let mut card = FakeCard::new(0, &cands);
    let out = free_room(100, &cands, &mut card).unwrap();
    let asked: Vec<u64> = card.asked.iter().map(|(k, _)| k.model).collect();
    assert_eq!(asked, vec![3, 2, 1, 5, 4]);
    assert!(!out.satisfied);
    assert_eq!(out.shortfall(), 95);
}

#[test]
fn stops_as_soon_as_the_truth_suffices() {
    let cands = vec![
        cand("a", 1, 4, 1.0),
        cand("a", 2, 4, 2.0),
        cand("a", 3, 4, 3.0),
    ];
    let mut card = FakeCard::new(1, &cands);
    let out = free_room(6, &cands, &mut card).unwrap();
    assert_eq!(out.steps.len(), 2);
    assert_eq!(out.freed(), 8);
    assert_eq!(out.free_after, 9);
    assert_eq!(card.reads, 3, "the truth is re-read after every step");
    assert_eq!(plan(6, 1, &cands), vec![0, 1]);
}

#[test]
fn the_truth_wins_over_the_plan() {
    // Another process frees 10 bytes right after the first eviction: the plan said two
    // models, the executor sees enough after one.
    let cands = vec![cand("a", 1, 4, 1.0), cand("a", 2, 4, 2.0)];
    let mut card = FakeCard::new(0, &cands);
    card.external = vec![10];
    let out = free_room(8, &cands, &mut card).unwrap();
    assert_eq!(plan(8, 0, &cands), vec![0, 1]);
    assert_eq!(out.steps.len(), 1);
    assert!(out.satisfied);
}

#[test]
fn partial_unload_of_the_last_model_asks_only_the_shortfall() {
    let mut big = cand("a", 1, 100, 1.0);
    big.partial_ok = true;
    let cands = vec![cand("b", 2, 10, 0.0), big];
    let mut card = FakeCard::new(5, &cands);
    let out = free_room(40, &cands, &mut card).unwrap();
    // b/2 (10 bytes, full), then 25 of a/1's 100.
    let asked: Vec<(u64, u64)> = out.steps.iter().map(|s| (s.key.model, s.asked)).collect();
    assert_eq!(asked, vec![(2, 10), (1, 25)]);
    assert_eq!(out.free_after, 40);

    // Same without partial unloads: the whole model goes.
    let mut cands = cands;
    cands[1].partial_ok = false;
    let mut card = FakeCard::new(5, &cands);
    let out = free_room(40, &cands, &mut card).unwrap();
    assert_eq!(out.steps.last().unwrap().asked, 100);
}

#[test]
fn refusals_are_recorded_and_skipped() {
    let cands = vec![
        cand("a", 1, 4, 1.0),
        cand("b", 2, 4, 2.0),
        cand("c", 3, 4, 3.0),
    ];
    let mut card = FakeCard::new(0, &cands);
    card.refuse.insert(key("a", 1));
    card.resident.remove(&key("b", 2));
    let out = free_room(4, &cands, &mut card).unwrap();
    let refused: Vec<Option<Refusal>> = out.steps.iter().map(|s| s.refused.clone()).collect();
    assert_eq!(
        refused,
        vec![Some(Refusal::Busy), Some(Refusal::Gone), None]
    );
    assert_eq!(out.refusals(), 2);
    assert_eq!(out.freed(), 4);
    assert!(out.satisfied);
}

#[test]
fn an_unreadable_truth_stops_the_decision() {
    let cands = vec![cand("a", 1, 4, 1.0)];
    let mut card = FakeCard::new(0, &cands);
    card.fail_truth = true;
    let err = free_room(4, &cands, &mut card).unwrap_err();
    assert!(matches!(err, ArbiterError::Truth(_)));
    assert!(err.to_string().contains("driver not loaded"), "{err}");
    assert!(card.asked.is_empty());
}

#[test]
fn models_in_use_are_never_asked_even_when_short() {
    let mut c = cand("a", 1, 100, 0.0);
    c.in_use = true;
    let cands = vec![c];
    let mut card = FakeCard::new(0, &cands);
    let out = free_room(10, &cands, &mut card).unwrap();
    assert!(card.asked.is_empty());
    assert!(!out.satisfied);
    assert_eq!(out.shortfall(), 10);
}
