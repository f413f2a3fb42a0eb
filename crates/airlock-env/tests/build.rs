//! Builds real environments with the real uv (the one `make setup` installs into `.venv`, or
//! `$AIRLOCK_UV`). Each test uses its own home; uv's own cache is shared, so after the first
//! run these take a second or two. Without uv the tests are skipped, except in CI (`CI=true`),
//! where a missing uv is a failure.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use airlock_env::{
    BuildError, EnvError, EnvOptions, EnvState, Home, Lines, Progress, Silent, UvLocator,
    ensure_env, env_state, plan_gc,
};

fn real_uv() -> Option<PathBuf> {
    let from_env = std::env::var_os("AIRLOCK_UV").map(PathBuf::from);
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/uv");
    let found = from_env.or_else(|| venv.exists().then_some(venv));
    if found.is_none() && std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("uv not found (.venv/bin/uv or AIRLOCK_UV): `make setup` must install it");
    }
    if found.is_none() {
        eprintln!("skipping: uv not found (run `make setup` or set AIRLOCK_UV)");
    }
    found
}

fn host_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("/usr/bin/python3")
    }
}

/// A temp home, a uv wrapper that counts its invocations, and a folder for packs.
struct Fixture {
    dir: tempfile::TempDir,
    opts: EnvOptions,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        let uv = real_uv()?;
        let dir = tempfile::Builder::new()
            .prefix("airlock-env-it")
            .tempdir()
            .unwrap();
        let wrapper = dir.path().join("uv-counting");
        fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
                dir.path().join("uv-calls").display(),
                uv.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
        let opts = EnvOptions {
            home: Home::new(dir.path().join("home")),
            comfyui_dir: None,
            host_python: Some(host_python()),
            uv: UvLocator {
                explicit: Some(wrapper),
                ..Default::default()
            },
        };
        Some(Fixture { dir, opts })
    }

    fn pack(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let p = self.dir.path().join("packs").join(name);
        fs::create_dir_all(&p).unwrap();
        for (f, text) in files {
            let path = p.join(f);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        p
    }

    fn uv_calls(&self) -> usize {
        fs::read_to_string(self.dir.path().join("uv-calls"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

fn imports(python: &Path, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .status()
        .unwrap()
        .success()
}

struct Record(Arc<Mutex<Vec<String>>>);

impl Progress for Record {
    fn phase(&self, pack: &str, phase: &str) {
        self.0.lock().unwrap().push(format!("{pack}: {phase}"));
    }
}

#[test]
fn builds_once_then_reuses_and_rebuilds_on_change() {
    let Some(fx) = Fixture::new() else { return };
    let pack = fx.pack("tiny", &[("airlock.toml", "dependencies = [\"six\"]\n")]);

    let phases = Arc::new(Mutex::new(Vec::new()));
    let first = ensure_env(&pack, &fx.opts, true, &Record(phases.clone())).unwrap();
    assert!(first.built);
    assert!(first.python.starts_with(fx.opts.home.envs()));
    assert!(imports(&first.python, "six"));
    assert!(
        fs::read_to_string(&first.lock_path)
            .unwrap()
            .contains("six==")
    );
    assert!(first.log_path.exists());
    let phases = phases.lock().unwrap().clone();
    assert!(
        phases.iter().any(|p| p.starts_with("tiny: resolving")),
        "{phases:?}"
    );
    assert!(
        phases
            .iter()
            .any(|p| p.starts_with("tiny: creating venv with Python")),
        "{phases:?}"
    );
    assert!(
        phases.iter().any(|p| p == "tiny: installing 1 package"),
        "{phases:?}"
    );

    // Unchanged: nothing is built and uv is not run at all.
    let calls = fx.uv_calls();
    let second = ensure_env(&pack, &fx.opts, true, &Silent).unwrap();
    assert!(!second.built);
    assert_eq!(second.key, first.key);
    assert_eq!(fx.uv_calls(), calls, "uv ran for unchanged inputs");
    let third = ensure_env(&pack, &fx.opts, false, &Silent).unwrap();
    assert_eq!(third.python, first.python);

    // A cosmetic change keeps the inputs hash.
    fs::write(pack.join("airlock.toml"), "dependencies = [ \"Six\" ]\n").unwrap();
    assert!(!ensure_env(&pack, &fx.opts, true, &Silent).unwrap().built);
    assert_eq!(fx.uv_calls(), calls);

    // A new requirement: not ready without building, then a new env.
    fs::write(
        pack.join("airlock.toml"),
        "dependencies = [\"six\", \"idna\"]\n",
    )
    .unwrap();
    let e = ensure_env(&pack, &fx.opts, false, &Silent).unwrap_err();
    assert!(e.is_missing(), "{e}");
    assert!(
        e.to_string()
            .starts_with("tiny: its environment is out of date"),
        "{e}"
    );
    let changed = ensure_env(&pack, &fx.opts, true, &Silent).unwrap();
    assert!(changed.built);
    assert_ne!(changed.key, first.key);
    assert!(imports(&changed.python, "idna"));

    // Back to the first inputs: their resolution and env are still there.
    fs::write(pack.join("airlock.toml"), "dependencies = [\"six\"]\n").unwrap();
    let calls = fx.uv_calls();
    let back = ensure_env(&pack, &fx.opts, true, &Silent).unwrap();
    assert!(!back.built);
    assert_eq!(back.key, first.key);
    assert_eq!(fx.uv_calls(), calls);

    // gc: the idna env is unused now; the current one is kept.
    let gc = plan_gc(&fx.opts, &[]).unwrap();
    let envs: Vec<_> = gc
        .items
        .iter()
        .filter(|i| i.path.starts_with(fx.opts.home.envs()))
        .collect();
    assert_eq!(envs.len(), 1, "{gc:?}");
    assert!(envs[0].path.ends_with(&changed.key));
    assert!(envs[0].size > 0);
    for (item, r) in gc.delete(&fx.opts) {
        r.unwrap_or_else(|e| panic!("{}: {e}", item.path.display()));
    }
    assert!(!changed.env_dir.exists());
    assert!(first.env_dir.exists());
    assert!(plan_gc(&fx.opts, &[]).unwrap().items.is_empty());
}

#[test]
fn half_built_env_is_rebuilt() {
    let Some(fx) = Fixture::new() else { return };
    let pack = fx.pack("half", &[("airlock.toml", "dependencies = [\"six\"]\n")]);
    let first = ensure_env(&pack, &fx.opts, true, &Silent).unwrap();
    fs::remove_file(first.env_dir.join(airlock_env::COMPLETE_MARKER)).unwrap();
    let (_, state) = env_state(&pack, &fx.opts).unwrap();
    assert!(
        matches!(
            state,
            EnvState::NotReady(airlock_env::NotReady::Broken { .. })
        ),
        "{state:?}"
    );
    let again = ensure_env(&pack, &fx.opts, true, &Silent).unwrap();
    assert!(again.built);
    assert_eq!(again.key, first.key);
    assert!(imports(&again.python, "six"));
}

#[test]
fn concurrent_builds_of_one_env_are_serialized() {
    let Some(fx) = Fixture::new() else { return };
    let pack = fx.pack("twice", &[("airlock.toml", "dependencies = [\"idna\"]\n")]);
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| s.spawn(|| ensure_env(&pack, &fx.opts, true, &Silent)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    assert!(results.iter().all(|r| r.key == results[0].key));
    assert!(imports(&results[0].python, "idna"));
    // Exactly one of them created the venv.
    let venvs = fs::read_to_string(fx.dir.path().join("uv-calls"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("venv "))
        .count();
    assert_eq!(venvs, 1);
}

#[test]
fn unknown_requirement_names_it_and_quotes_uv() {
    let Some(fx) = Fixture::new() else { return };
    let pack = fx.pack(
        "badreq",
        &[(
            "airlock.toml",
            "dependencies = [\"six\", \"airlock-no-such-package-xyz==1.0\"]\n",
        )],
    );
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    let progress = Lines(move |s: &str| l.lock().unwrap().push(s.to_string()));
    let e = ensure_env(&pack, &fx.opts, true, &progress).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("badreq: resolving its requirements failed"),
        "{msg}"
    );
    assert_eq!(
        e.requirement(),
        Some("airlock-no-such-package-xyz==1.0"),
        "{msg}"
    );
    let uv = e.uv_message().unwrap().join("\n");
    assert!(uv.contains("airlock-no-such-package-xyz"), "{uv}");
    let log = e.log().unwrap();
    assert!(msg.contains(&log.display().to_string()));
    assert!(fs::read_to_string(log).unwrap().contains("pip compile"));
    assert!(
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("badreq: resolving"))
    );
}

#[test]
fn python_that_does_not_exist_is_a_clear_error() {
    let Some(fx) = Fixture::new() else { return };
    let pack = fx.pack("oldpy", &[("airlock.toml", "python = \"3.4\"\n")]);
    let e = ensure_env(&pack, &fx.opts, true, &Silent).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            EnvError::Build {
                kind: BuildError::InterpreterNotFound { .. },
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.starts_with("oldpy: no Python interpreter found for python = \"3.4\""),
        "{msg}"
    );
    assert!(msg.contains("uv says:"), "{msg}");
}

#[test]
fn explicit_python_version_and_comfy_requirements() {
    let Some(fx) = Fixture::new() else { return };
    let host = airlock_env::probe(&host_python()).unwrap();
    let minor = format!("{}.{}", host.release()[0], host.release()[1]);
    let comfyui = fx.dir.path().join("ComfyUI");
    fs::create_dir_all(&comfyui).unwrap();
    fs::write(
        comfyui.join("requirements.txt"),
        "comfyui-frontend-package==1.28.8\nidna\n#non essential dependencies:\nsix\n",
    )
    .unwrap();
    let pack = fx.pack(
        "usescomfy",
        &[
            ("airlock.toml", &format!("python = \"{minor}\"\n")),
            ("nodes.py", "import folder_paths\n"),
        ],
    );
    // Without a ComfyUI folder the pack cannot be built, and the error says why.
    let e = ensure_env(&pack, &fx.opts, true, &Silent).unwrap_err();
    assert!(
        e.to_string().contains("imports ComfyUI (folder_paths in"),
        "{e}"
    );

    let opts = EnvOptions {
        comfyui_dir: Some(comfyui),
        ..fx.opts.clone()
    };
    let info = ensure_env(&pack, &opts, true, &Silent).unwrap();
    assert!(info.comfy && info.built);
    assert!(imports(&info.python, "idna") && imports(&info.python, "six"));
    let lock = fs::read_to_string(&info.lock_path).unwrap();
    assert!(!lock.contains("frontend"), "{lock}");
    assert_eq!(info.interpreter.release()[..2], host.release()[..2]);
}

#[test]
fn comfy_requirements_by_default_at_the_hosts_versions() {
    let Some(fx) = Fixture::new() else { return };
    let host = host_python();
    let version = |name: &str| -> Option<String> {
        let out = Command::new(&host)
            .args([
                "-c",
                &format!("import importlib.metadata as m; print(m.version({name:?}))"),
            ])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(idna) = version("idna") else { return };
    let comfyui = fx.dir.path().join("ComfyUI");
    fs::create_dir_all(&comfyui).unwrap();
    fs::write(comfyui.join("requirements.txt"), "idna\n").unwrap();
    let opts = EnvOptions {
        comfyui_dir: Some(comfyui),
        ..fx.opts.clone()
    };
    let lock_of = |pack: &Path| {
        let info = ensure_env(pack, &opts, true, &Silent).unwrap();
        (info.comfy, fs::read_to_string(&info.lock_path).unwrap())
    };
    // Imports nothing of ComfyUI, lists nothing: ComfyUI's requirements, at the host's version.
    let plain = fx.pack(
        "plain",
        &[("airlock.toml", ""), ("__init__.py", "import os\n")],
    );
    let (comfy, lock) = lock_of(&plain);
    assert!(comfy);
    assert!(lock.contains(&format!("idna=={idna}")), "{lock}");
    // The pack constrains it: its constraint decides, not the host's version.
    let pins = fx.pack("pins", &[("airlock.toml", "dependencies = [\"idna<3\"]\n")]);
    let (_, lock) = lock_of(&pins);
    assert!(lock.contains("idna==2."), "{lock}");
    // Opted out: nothing of ComfyUI's.
    let out = fx.pack("optout", &[("airlock.toml", "comfy = false\n")]);
    let (comfy, lock) = lock_of(&out);
    assert!(!comfy && !lock.contains("idna"), "{lock}");
}
