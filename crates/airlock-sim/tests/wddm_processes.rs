//! The seed's headline scenario with real processes and no bridge: a worker process holds
//! 12 GiB of a 16 GiB card and the host (this test process) loads 6 GiB, deciding on its own
//! free-memory reading as upstream's `load_models_gpu` does. On WDDM semantics the reading is
//! blind to the worker, the host over-admits and the worker, a bystander, is demoted; on
//! device-wide semantics the host reads the truth and does not. The worker is this test binary
//! run again (the `child` test does nothing unless `AIRLOCK_TEST_ROLE` is set).

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

use airlock_sim::{CardSpec, Demotions, SIM_GPU_ENV, Semantics, SimError, SimGpu};

const ROLE: &str = "AIRLOCK_TEST_ROLE";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The children's side: books 12 GiB under its own pid, says so, and holds it until its stdin
/// closes; exits without releasing (the host reaps it).
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "worker");
    let card = SimGpu::from_env().unwrap().expect("AIRLOCK_SIM_GPU is set");
    card.book(std::process::id(), "model", 12 * GIB).unwrap();
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

struct Worker {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Worker {
    fn start(card: &SimGpu) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE, "worker")
            .env(SIM_GPU_ENV, card.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "worker died");
            if line.trim() == "ready" {
                break;
            }
        }
        Worker { child, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        assert!(self.child.wait().unwrap().success());
    }
}

fn card(dir: &tempfile::TempDir, semantics: Semantics) -> SimGpu {
    let spec = CardSpec::new("NVIDIA Simulated 16 GB", 16 * GIB).with_semantics(semantics);
    SimGpu::create_with(dir.path().join("gpu"), &spec).unwrap()
}

/// Upstream's admission, reduced to its input: the host loads when its reading says the model
/// fits. Returns whether it booked.
fn host_loads(card: &SimGpu, host: u32, bytes: u64) -> bool {
    if bytes > card.free_seen_by(host) {
        return false;
    }
    card.book_checked(host, "model", bytes).unwrap();
    true
}

#[test]
fn on_wddm_the_blind_host_over_admits_and_the_worker_is_demoted() {
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir, Semantics::WDDM);
    let host = std::process::id();
    // The host's CUDA context exists before the worker starts.
    assert!(card.attach(host).unwrap());
    let worker = Worker::start(&card);
    assert_eq!(card.used_by(worker.pid()), 12 * GIB);
    assert_eq!(card.free(), 4 * GIB, "the truth, as NVML reports it");
    // The worker's start re-partitioned the host's budget on an empty card (16 GiB + 533 MB,
    // read as the card's 16 GiB); the worker's 12 GiB came after, unseen.
    assert_eq!(card.free_seen_by(host), 16 * GIB);

    assert!(
        host_loads(&card, host, 6 * GIB),
        "the host's reading admits 6 GiB"
    );
    assert_eq!(card.overcommitted(), 2 * GIB);
    let hit = card.demotions(worker.pid());
    assert!(hit.count > 0, "the bystander was demoted");
    assert_eq!(
        hit,
        Demotions {
            count: 1,
            bytes: 2 * GIB
        }
    );
    assert_eq!(card.demotions(host), Demotions::default());
    // Still blind: the host reads its budget less its own 6 GiB.
    assert_eq!(card.free_seen_by(host), 10 * GIB + 533 * MIB);

    // The worker exits; reaping it is the exit event that re-partitions the host.
    let wpid = worker.pid();
    worker.stop();
    assert_eq!(card.reap(), vec![wpid]);
    assert_eq!(card.free(), 10 * GIB);
    assert_eq!(card.free_seen_by(host), 10 * GIB + 533 * MIB);
    assert!(card.process_views()[0].repartitioned);
    assert_eq!(card.demotions_total().count, 1, "outlives the worker");
    card.release_process(host);
    assert_eq!((card.slots_in_use(), card.processes_attached()), (0, 0));
}

#[test]
fn device_wide_the_host_reads_the_truth_and_does_not_over_admit() {
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir, Semantics::DeviceWide);
    let host = std::process::id();
    assert!(!card.attach(host).unwrap());
    let worker = Worker::start(&card);
    assert_eq!(card.free_seen_by(host), 4 * GIB);
    assert_eq!(card.free_seen_by(host), card.free());
    assert!(!host_loads(&card, host, 6 * GIB));
    assert!(matches!(
        card.book_checked(host, "model", 6 * GIB),
        Err(SimError::OutOfMemory { .. })
    ));
    assert_eq!(card.overcommitted(), 0);
    assert_eq!(card.demotions_total(), Demotions::default());
    let wpid = worker.pid();
    worker.stop();
    assert_eq!(card.reap(), vec![wpid]);
    assert!(host_loads(&card, host, 6 * GIB));
    card.release_process(host);
    assert_eq!(card.slots_in_use(), 0);
}

#[test]
fn a_third_process_starting_re_partitions_the_host() {
    // The seed's measurement: the observer's reading did not move while a sibling grew, and
    // moved when a third process started.
    let dir = tempfile::tempdir().unwrap();
    let card = card(&dir, Semantics::WDDM);
    let host = std::process::id();
    card.attach(host).unwrap();
    let first = Worker::start(&card);
    assert_eq!(card.free_seen_by(host), 16 * GIB);
    let second = Worker::start(&card);
    // The second worker's start happened with 4 GiB truly free: the host now reads that plus
    // the re-partition bias. Its 12 GiB, booked after, are unseen again.
    assert_eq!(card.free_seen_by(host), 4 * GIB + 533 * MIB);
    // 24 GiB booked on 16: the second worker's growth demoted the first.
    assert_eq!(card.demotions(first.pid()).bytes, 8 * GIB);
    for w in [first, second] {
        let pid = w.pid();
        w.stop();
        card.release_process(pid);
    }
    assert_eq!(card.free_seen_by(host), 16 * GIB);
    card.release_process(host);
}
