//! Solving and installing from channels made at test time (tiny packages, indexed with
//! rattler_index), and the errors a pack's author sees when that goes wrong.

use std::fs;
use std::path::Path;

use airlock_conda::testing::{TestPackage, make_channel};
use airlock_conda::{CondaError, CondaLock, CondaRequest, CondaSpec, SystemRequirements};

fn channel(dir: &Path) -> String {
    let ch = dir.join("channel");
    make_channel(
        &ch,
        &[
            TestPackage::new("libtiny", "1.0", "linux-64").file("lib/libtiny.txt", "tiny 1.0\n"),
            TestPackage::new("libtiny", "1.1", "linux-64").file("lib/libtiny.txt", "tiny 1.1\n"),
            TestPackage::new("tinytool", "2.0", "noarch")
                .depends("libtiny >=1.0")
                .file("share/tinytool/VERSION", "2.0\n")
                .link("share/tinytool/current", "VERSION"),
            TestPackage::new("gpuonly", "1.0", "linux-64")
                .depends("__cuda >=12")
                .file("share/gpuonly", "x\n"),
        ],
    )
    .unwrap();
    ch.display().to_string()
}

fn request(dir: &Path, channels: Vec<String>, specs: &[(&str, &str)]) -> CondaRequest {
    CondaRequest {
        channels,
        specs: specs.iter().map(|(n, v)| CondaSpec::new(n, v)).collect(),
        system: SystemRequirements::default(),
        root_dir: dir.to_path_buf(),
    }
}

#[test]
fn solves_installs_and_round_trips_the_lock() {
    let d = tempfile::tempdir().unwrap();
    let ch = channel(d.path());
    let cache = d.path().join("cache");
    let lines = std::cell::RefCell::new(Vec::<String>::new());
    let report = |l: &str| lines.borrow_mut().push(l.to_string());
    let req = request(d.path(), vec![ch.clone()], &[("tinytool", "*")]);
    let lock = airlock_conda::solve(&req, &cache, &report).unwrap();
    let names: Vec<String> = lock.packages().iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, ["libtiny", "tinytool"]);
    assert_eq!(lock.packages()[0].version, "1.1", "the newest that fits");
    assert!(lock.python().is_none());

    // The text is the lock: written, read back, the same; and stable across solves.
    let text = lock.to_text();
    let again = CondaLock::from_text(&text, Path::new("x")).unwrap();
    assert_eq!(again, lock);
    let relock = airlock_conda::solve(&req, &cache, &report).unwrap();
    assert_eq!(relock.to_text(), text);

    let prefix = d.path().join("env");
    let n = airlock_conda::install(&lock, &prefix, &cache, &report).unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        fs::read_to_string(prefix.join("lib/libtiny.txt")).unwrap(),
        "tiny 1.1\n"
    );
    let link = prefix.join("share/tinytool/current");
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("VERSION"));
    assert!(prefix.join("conda-meta").is_dir());
    let said = lines.borrow().join("\n");
    assert!(said.contains("solving 1 conda package from"), "{said}");
    assert!(said.contains("installing 2 conda packages into"), "{said}");

    // A pinned version, and a version that does not exist.
    let pinned = request(d.path(), vec![ch.clone()], &[("libtiny", "1.0")]);
    let lock = airlock_conda::solve(&pinned, &cache, &report).unwrap();
    assert_eq!(lock.packages()[0].version, "1.0");
    let missing = request(d.path(), vec![ch], &[("tinytool", ">=3")]);
    let e = airlock_conda::solve(&missing, &cache, &report).unwrap_err();
    assert!(matches!(e, CondaError::Unsolvable { .. }), "{e:?}");
    assert!(e.to_string().contains("tinytool"), "{e}");
}

#[test]
fn an_unreachable_channel_names_itself_and_the_packages() {
    let d = tempfile::tempdir().unwrap();
    let ch = channel(d.path());
    let cache = d.path().join("cache");
    let gone = d.path().join("no-such-channel").display().to_string();
    let req = request(
        d.path(),
        vec![ch, gone.clone()],
        &[("tinytool", "*"), ("cgal", "*")],
    );
    let e = airlock_conda::solve(&req, &cache, &|_: &str| {}).unwrap_err();
    match &e {
        CondaError::Unreachable {
            channel, packages, ..
        } => {
            assert_eq!(channel, &gone);
            assert_eq!(packages, "tinytool, cgal");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("cannot be reached"), "{e}");

    // A name read under an alias that points nowhere (a mirror that is down).
    let req = CondaRequest {
        channels: vec!["http://127.0.0.1:9/conda-forge".into()],
        ..request(d.path(), vec![], &[("cgal", "*")])
    };
    let e = airlock_conda::solve(&req, &cache, &|_: &str| {}).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("conda channel http://127.0.0.1:9/conda-forge (http://127.0.0.1:9/conda-forge/) cannot be reached while looking for cgal: "),
        "{msg}"
    );
}

#[test]
fn system_requirements_are_the_solve_s_virtual_packages() {
    let d = tempfile::tempdir().unwrap();
    let ch = channel(d.path());
    let cache = d.path().join("cache");
    let mut req = request(d.path(), vec![ch], &[("gpuonly", "*")]);
    let e = airlock_conda::solve(&req, &cache, &|_: &str| {}).unwrap_err();
    assert!(e.to_string().contains("__cuda"), "{e}");
    req.system.cuda = Some("12.4".into());
    let lock = airlock_conda::solve(&req, &cache, &|_: &str| {}).unwrap();
    assert_eq!(lock.packages()[0].name, "gpuonly");
}
