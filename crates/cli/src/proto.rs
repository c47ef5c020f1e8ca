//! The CLI socket protocol shared by `sluice` (server) and `sluicectl` (client): one request
//! = `u32` little-endian length + UTF-8 command; one response = `u32` LE length N (N >= 1),
//! a status byte (0 ok, 1 error) and N-1 bytes of UTF-8 output.

use std::io::{self, Read, Write};
use std::path::PathBuf;

/// Largest frame accepted.
pub const MAX_FRAME: usize = 16 << 20;

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "frame too large")
}

/// Sends a command.
pub fn write_request(w: &mut impl Write, cmd: &str) -> io::Result<()> {
    if cmd.len() > MAX_FRAME {
        return Err(too_large());
    }
    let mut v = Vec::with_capacity(4 + cmd.len());
    v.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
    v.extend_from_slice(cmd.as_bytes());
    w.write_all(&v)?;
    w.flush()
}

/// Reads a command; `Ok(None)` on a clean end of stream before a frame.
pub fn read_request(r: &mut impl Read) -> io::Result<Option<String>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut len[got..])?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(too_large());
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Ok(Some(String::from_utf8_lossy(&body).into_owned()))
}

/// Sends a response.
pub fn write_response(w: &mut impl Write, ok: bool, text: &str) -> io::Result<()> {
    let n = text.len() + 1;
    if n > MAX_FRAME {
        return Err(too_large());
    }
    let mut v = Vec::with_capacity(4 + n);
    v.extend_from_slice(&(n as u32).to_le_bytes());
    v.push(if ok { 0 } else { 1 });
    v.extend_from_slice(text.as_bytes());
    w.write_all(&v)?;
    w.flush()
}

/// Reads a response: (ok, text).
pub fn read_response(r: &mut impl Read) -> io::Result<(bool, String)> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(too_large());
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Ok((
        body[0] == 0,
        String::from_utf8_lossy(&body[1..]).into_owned(),
    ))
}

/// The default CLI socket: `/run/sluice/cli.sock` as root, else
/// `$XDG_RUNTIME_DIR/sluice/cli.sock`, else `/tmp/sluice-<uid>/cli.sock`.
pub fn default_cli_socket() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/sluice/cli.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("sluice/cli.sock"),
        _ => PathBuf::from(format!("/tmp/sluice-{uid}/cli.sock")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut v = Vec::new();
        write_request(&mut v, "show runtime").unwrap();
        write_request(&mut v, "").unwrap();
        let mut r = &v[..];
        assert_eq!(
            read_request(&mut r).unwrap().as_deref(),
            Some("show runtime")
        );
        assert_eq!(read_request(&mut r).unwrap().as_deref(), Some(""));
        assert_eq!(read_request(&mut r).unwrap(), None);
        let mut v = Vec::new();
        write_response(&mut v, false, "unknown input `x'").unwrap();
        assert_eq!(
            read_response(&mut &v[..]).unwrap(),
            (false, "unknown input `x'".into())
        );
    }

    #[test]
    fn truncated_and_oversize_frames() {
        let mut v = Vec::new();
        write_request(&mut v, "abcdef").unwrap();
        assert!(read_request(&mut &v[..7]).is_err());
        assert!(read_request(&mut &v[..2]).is_err());
        let big = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(read_request(&mut &big[..]).is_err());
        assert!(read_response(&mut &[0u8, 0, 0, 0][..]).is_err());
    }
}
