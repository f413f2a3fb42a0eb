//! Several real processes book on one card at once: the test binary runs itself as children
//! (the `child` test does nothing unless `AIRLOCK_TEST_ROLE` is set), which open the card named
//! by `AIRLOCK_SIM_GPU`, as workers will.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_sim::{SIM_GPU_ENV, SimGpu, alive};

const ROLE: &str = "AIRLOCK_TEST_ROLE";
const SHARED_PID: &str = "AIRLOCK_TEST_SHARED_PID";
const ROUNDS: u64 = 400;
const TAGS: u64 = 4;

fn spawn(role: &str, card: &SimGpu) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(ROLE, role)
        .env(SIM_GPU_ENV, card.path())
        .env(SHARED_PID, std::process::id().to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// What each "book" child leaves booked under its own pid: tag `m<k>` holds `(k + 1) * 1000`.
fn final_bytes(k: u64) -> u64 {
    (k + 1) * 1000
}

/// The children's side.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let card = SimGpu::from_env().unwrap().expect("AIRLOCK_SIM_GPU is set");
    let me = std::process::id();
    let shared: u32 = std::env::var(SHARED_PID).unwrap().parse().unwrap();
    match role.as_str() {
        "book" => {
            for r in 0..ROUNDS {
                let tag = format!("m{}", r % TAGS);
                card.book(me, &tag, r * 7 + 1).unwrap();
                card.add(me, &tag, 3).unwrap();
                if r % 5 == 0 {
                    card.release(me, &tag).unwrap();
                }
                // Every child also churns one key of the parent's pid: a key booked by many
                // processes at once must still have one slot.
                card.book(shared, "shared", r % 3).unwrap();
            }
            card.book(shared, "shared", 10).unwrap();
            for k in 0..TAGS {
                card.book(me, &format!("m{k}"), final_bytes(k)).unwrap();
            }
        }
        "hold" => {
            card.book(me, "model", 1 << 30).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn processes_book_on_one_card_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let card = SimGpu::create(dir.path().join("gpu"), "sim0", 64 << 30).unwrap();
    let children: Vec<Child> = (0..4).map(|_| spawn("book", &card)).collect();
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a booking child failed");
    }
    let per_child: u64 = (0..TAGS).map(final_bytes).sum();
    for &pid in &pids {
        assert_eq!(card.used_by(pid), per_child, "pid {pid}");
    }
    let me = std::process::id();
    let shared: Vec<_> = card
        .bookings()
        .into_iter()
        .filter(|b| b.pid == me)
        .collect();
    assert_eq!(shared.len(), 1, "one slot for the shared key: {shared:?}");
    assert_eq!(shared[0].bytes, 10);
    assert_eq!(card.used(), 4 * per_child + 10);
    assert_eq!(card.slots_in_use(), 4 * TAGS as usize + 1);

    // The children have exited: reaping drops exactly their bookings.
    let mut reaped = card.reap();
    reaped.sort_unstable();
    let mut want = pids.clone();
    want.sort_unstable();
    assert_eq!(reaped, want);
    assert_eq!(card.used(), 10);
    card.release_process(me);
    assert_eq!(card.slots_in_use(), 0);
}

#[test]
fn a_killed_process_is_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let card = SimGpu::create(dir.path().join("gpu"), "sim0", 16 << 30).unwrap();
    let mut child = spawn("hold", &card);
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while card.used_by(pid) == 0 {
        assert!(Instant::now() < deadline, "child never booked");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(card.reap().is_empty(), "a live process keeps its bookings");
    child.kill().unwrap();
    // A zombie until waited for, and already dead to `reap`.
    while alive(pid) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(card.reap(), vec![pid]);
    child.wait().unwrap();
    assert_eq!(card.free(), card.total());
}
