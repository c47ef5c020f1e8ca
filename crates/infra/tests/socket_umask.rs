//! The socket helper under a `000` umask (a process of its own: the umask is process-wide).

use sluice_infra::unix_socket::{check_before_connect, OwnedListener, SocketPerms};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn explicit_modes_survive_umask_000() {
    let d = std::env::temp_dir().join(format!("sluice-sock-umask-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let p = d.join("sub").join("cli.sock");
    // SAFETY: umask swaps the process's creation mask; this test binary has one test.
    let old = unsafe { libc::umask(0) };
    let l = OwnedListener::bind(&p, &SocketPerms::default()).unwrap();
    assert_eq!(mode(&d), 0o755, "missing parents 0755");
    assert_eq!(
        mode(&d.join("sub")),
        0o700,
        "the socket's own directory 0700"
    );
    assert_eq!(mode(&p), 0o660, "the socket 0660, not 0777");
    assert!(std::fs::symlink_metadata(&p)
        .unwrap()
        .file_type()
        .is_socket());
    // SAFETY: restores the mask.
    unsafe { libc::umask(old) };
    check_before_connect(&p).unwrap();
    UnixStream::connect(&p).unwrap();
    drop(l);
    assert!(!p.exists(), "removed on drop");
    std::fs::remove_dir_all(&d).unwrap();
}
