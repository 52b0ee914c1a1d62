//! Compiles `tests/c/abi_test.c` against the `libfolio.a` and `libfolio.so` that cargo
//! built for this test run, runs each, and fails unless every C check passed. Proves the
//! C ABI from C: every function of `include/folio.h`, misuse included.
//!
//! Cargo builds only an rlib of a library for its integration tests, never its cdylib or
//! staticlib, so this test builds them itself: `cargo build -p folio-capi --lib` with the
//! profile and target directory of this test binary (`target/<profile>/deps/c_abi-*`),
//! once per run; the libraries land in `target/<profile>/`. The C compiler is `$CC`, else
//! `cc`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What rustc says a static Rust library needs on this target
/// (`--print native-static-libs`).
const NATIVE_STATIC_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];

/// Builds libfolio.a and libfolio.so (once) and returns the directory holding them.
fn artifact_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in <target>/<profile>/deps")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("<target>/<profile>");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(other) => other,
            None => panic!("no profile directory in {}", profile_dir.display()),
        };
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let status = Command::new(env!("CARGO"))
            .args(["build", "--lib", "--profile", profile, "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target_dir)
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "cargo build of folio-capi failed: {status}"
        );
        for lib in ["libfolio.a", "libfolio.so"] {
            assert!(
                profile_dir.join(lib).exists(),
                "cargo built folio-capi but {} is missing",
                profile_dir.join(lib).display()
            );
        }
        profile_dir
    })
}

fn compile(out: &Path, link: &[String]) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
        ])
        .arg("-I")
        .arg(crate_dir.join("../../include"))
        .arg(crate_dir.join("tests/c/abi_test.c"))
        .arg("-o")
        .arg(out)
        .args(link)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(status.success(), "compiling abi_test.c failed: {status}");
}

fn run(exe: &Path) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(exe)
        .arg(dir.path())
        .output()
        .expect("abi_test runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        output.status.success() && stdout.contains(" passed, 0 failed"),
        "{} failed ({}):\n{stdout}{stderr}",
        exe.display(),
        output.status
    );
}

#[test]
fn c_program_against_the_static_library() {
    let libs = artifact_dir();
    let out = tempfile::tempdir().unwrap();
    let exe = out.path().join("abi_test_static");
    let mut link = vec![libs.join("libfolio.a").display().to_string()];
    link.extend(NATIVE_STATIC_LIBS.iter().map(|s| s.to_string()));
    compile(&exe, &link);
    run(&exe);
}

#[test]
fn c_program_against_the_shared_library() {
    let libs = artifact_dir();
    let out = tempfile::tempdir().unwrap();
    let exe = out.path().join("abi_test_shared");
    let link = vec![
        format!("-L{}", libs.display()),
        "-lfolio".to_string(),
        format!("-Wl,-rpath,{}", libs.display()),
    ];
    compile(&exe, &link);
    run(&exe);
}
