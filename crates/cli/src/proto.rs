//! Framing of the Sluice CLI socket, shared by the daemon (server side) and `sluicectl`
//! (client side).
//!
//! The transport is a Unix `SOCK_STREAM` socket carrying a sequence of request/response pairs:
//!
//! - **request**: `u32` little-endian length `N`, then `N` bytes of UTF-8 command text (one CLI
//!   command; it may contain newlines, e.g. a `{ ... }` block);
//! - **response**: `u32` little-endian length `N` (`N >= 1`), then one status byte
//!   (`0` = ok, `1` = error), then `N - 1` bytes of UTF-8 output text. A long reply comes in
//!   pieces: frames with status `2` (more follows) carry its text in order, then the frame
//!   with status `0`/`1` ends it (its text is the last piece).
//!
//! No frame may exceed [`MAX_FRAME`] bytes (the length prefix excluded); a larger one is refused
//! with [`io::ErrorKind::InvalidData`] ("frame too large") before anything is allocated or sent.
//! Text that is not valid UTF-8 is converted lossily on receipt.
//!
//! This module depends on `std` and `libc` only (for the effective uid, see
//! [`default_cli_socket`]), so it can move into a library crate unchanged.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::PathBuf;

/// Largest accepted frame body (16 MiB), length prefix excluded.
pub const MAX_FRAME: usize = 16 << 20;

const STATUS_OK: u8 = 0;
const STATUS_ERR: u8 = 1;
const STATUS_MORE: u8 = 2;

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "frame too large")
}

/// Reads a length prefix. `Ok(None)` on EOF before its first byte; `UnexpectedEof` on EOF
/// inside it; `InvalidData` when it announces more than [`MAX_FRAME`].
fn read_len(r: &mut impl Read) -> io::Result<Option<usize>> {
    let mut hdr = [0u8; 4];
    let mut got = 0;
    while got < hdr.len() {
        match r.read(&mut hdr[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame header",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let n = u32::from_le_bytes(hdr) as usize;
    if n > MAX_FRAME {
        return Err(too_large());
    }
    Ok(Some(n))
}

/// Reads exactly `n` bytes without trusting `n` for the allocation up front (the buffer grows
/// as data actually arrives).
fn read_body(r: &mut impl Read, n: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n.min(64 << 10));
    r.take(n as u64).read_to_end(&mut buf)?;
    if buf.len() != n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "truncated frame body",
        ));
    }
    Ok(buf)
}

fn write_frame(w: &mut impl Write, status: Option<u8>, body: &[u8]) -> io::Result<()> {
    let n = body.len() + usize::from(status.is_some());
    if n > MAX_FRAME {
        return Err(too_large());
    }
    let mut frame = Vec::with_capacity(4 + n);
    // n <= MAX_FRAME < u32::MAX, so the cast is lossless.
    frame.extend_from_slice(&(n as u32).to_le_bytes());
    frame.extend(status);
    frame.extend_from_slice(body);
    w.write_all(&frame)?;
    w.flush()
}

/// Sends one command as a request frame.
pub fn write_request(w: &mut impl Write, cmd: &str) -> io::Result<()> {
    write_frame(w, None, cmd.as_bytes())
}

/// Receives one request frame. `Ok(None)` on a clean EOF before a frame starts (the client hung
/// up); `UnexpectedEof` if the stream ends inside a frame; `InvalidData` if the frame is larger
/// than [`MAX_FRAME`]. Invalid UTF-8 is replaced with U+FFFD.
pub fn read_request(r: &mut impl Read) -> io::Result<Option<String>> {
    let Some(n) = read_len(r)? else {
        return Ok(None);
    };
    let body = read_body(r, n)?;
    Ok(Some(String::from_utf8_lossy(&body).into_owned()))
}

/// Sends one response frame: status `ok` (true = 0, false = 1) and the output text.
pub fn write_response(w: &mut impl Write, ok: bool, text: &str) -> io::Result<()> {
    let status = if ok { STATUS_OK } else { STATUS_ERR };
    write_frame(w, Some(status), text.as_bytes())
}

/// Sends one piece of a reply that goes on (status 2).
pub fn write_chunk(w: &mut impl Write, text: &str) -> io::Result<()> {
    write_frame(w, Some(STATUS_MORE), text.as_bytes())
}

/// Receives one response, passing each piece of its text to `piece` as it arrives (a long
/// reply comes in several frames) with `None` while more follows and, for the last piece,
/// whether the command succeeded; returns that. Errors as [`read_response`].
pub fn read_response_pieces(
    r: &mut impl Read,
    mut piece: impl FnMut(&str, Option<bool>),
) -> io::Result<bool> {
    loop {
        let (status, text) = read_frame_status(r)?;
        if status == STATUS_MORE {
            piece(&text, None);
        } else {
            piece(&text, Some(status == STATUS_OK));
            return Ok(status == STATUS_OK);
        }
    }
}

/// Receives one response frame: `(ok, text)`, the pieces of a long reply joined. Any EOF (before or inside the frame) is
/// `UnexpectedEof`, since a reply was expected; a zero length, an unknown status byte or a frame
/// larger than [`MAX_FRAME`] is `InvalidData`. Invalid UTF-8 is replaced with U+FFFD.
pub fn read_response(r: &mut impl Read) -> io::Result<(bool, String)> {
    let mut text = String::new();
    let ok = read_response_pieces(r, |p, _| text.push_str(p))?;
    Ok((ok, text))
}

/// One response frame: its status byte and text.
fn read_frame_status(r: &mut impl Read) -> io::Result<(u8, String)> {
    let Some(n) = read_len(r)? else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before the reply",
        ));
    };
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "empty response frame (no status byte)",
        ));
    }
    let body = read_body(r, n)?;
    match body[0] {
        STATUS_OK | STATUS_ERR | STATUS_MORE => {}
        s => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown response status {s}"),
            ))
        }
    };
    Ok((body[0], String::from_utf8_lossy(&body[1..]).into_owned()))
}

/// The default CLI socket path:
/// - `/run/sluice/cli.sock` when running as root (effective uid 0);
/// - else `$XDG_RUNTIME_DIR/sluice/cli.sock` if `XDG_RUNTIME_DIR` is set and not empty;
/// - else `/tmp/sluice-<uid>/cli.sock`.
///
/// The uid is the *effective* uid, from `libc::geteuid` (it cannot fail); the effective uid is
/// the identity that owns the socket the daemon creates, so client and daemon agree.
pub fn default_cli_socket() -> PathBuf {
    // SAFETY: geteuid takes no arguments, touches no memory we own and always succeeds.
    let euid = unsafe { libc::geteuid() };
    socket_for(euid, std::env::var_os("XDG_RUNTIME_DIR"))
}

fn socket_for(euid: u32, xdg_runtime_dir: Option<OsString>) -> PathBuf {
    if euid == 0 {
        return PathBuf::from("/run/sluice/cli.sock");
    }
    match xdg_runtime_dir {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("sluice").join("cli.sock"),
        _ => PathBuf::from(format!("/tmp/sluice-{euid}/cli.sock")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::os::unix::net::UnixStream;

    fn frame(len: u32, body: &[u8]) -> Vec<u8> {
        let mut v = len.to_le_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn a_reply_in_pieces_is_read_whole_or_piece_by_piece() {
        let mut b = Vec::new();
        write_chunk(&mut b, "one\n").unwrap();
        write_chunk(&mut b, "two\n").unwrap();
        write_response(&mut b, true, "three\n").unwrap();
        assert_eq!(
            read_response(&mut Cursor::new(b.clone())).unwrap(),
            (true, "one\ntwo\nthree\n".to_string())
        );
        let mut seen = Vec::new();
        let ok = read_response_pieces(&mut Cursor::new(b), |p, end| {
            seen.push((p.to_string(), end))
        })
        .unwrap();
        assert!(ok);
        assert_eq!(seen[0], ("one\n".to_string(), None));
        assert_eq!(seen[2], ("three\n".to_string(), Some(true)));
    }

    #[test]
    fn request_wire_format_is_le_length_then_text() {
        let mut v = Vec::new();
        write_request(&mut v, "show int").unwrap();
        assert_eq!(v, frame(8, b"show int"));
    }

    #[test]
    fn response_wire_format_has_status_byte_counted_in_length() {
        let mut v = Vec::new();
        write_response(&mut v, true, "hi").unwrap();
        assert_eq!(v, frame(3, b"\0hi"));
        let mut v = Vec::new();
        write_response(&mut v, false, "").unwrap();
        assert_eq!(v, frame(1, b"\x01"));
    }

    #[test]
    fn requests_round_trip_in_sequence_then_clean_eof() {
        let cmds = ["show version", "", "pg new {\n  name x\n}", "état ✓"];
        let mut v = Vec::new();
        for c in cmds {
            write_request(&mut v, c).unwrap();
        }
        let mut r = Cursor::new(v);
        for c in cmds {
            assert_eq!(read_request(&mut r).unwrap().as_deref(), Some(c));
        }
        assert_eq!(read_request(&mut r).unwrap(), None);
    }

    #[test]
    fn responses_round_trip_with_status() {
        let mut v = Vec::new();
        write_response(&mut v, true, "line1\nline2\n").unwrap();
        write_response(&mut v, false, "unknown input `x'").unwrap();
        write_response(&mut v, true, "").unwrap();
        let mut r = Cursor::new(v);
        assert_eq!(
            read_response(&mut r).unwrap(),
            (true, "line1\nline2\n".into())
        );
        assert_eq!(
            read_response(&mut r).unwrap(),
            (false, "unknown input `x'".into())
        );
        assert_eq!(read_response(&mut r).unwrap(), (true, String::new()));
    }

    #[test]
    fn round_trip_over_a_socket_pair() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        let big = "x".repeat(1 << 20);
        let srv = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while let Some(cmd) = read_request(&mut server).unwrap() {
                write_response(&mut server, cmd != "fail", &format!("echo: {cmd}")).unwrap();
                seen.push(cmd.len());
            }
            seen
        });
        for cmd in ["show runtime", "fail", big.as_str()] {
            write_request(&mut client, cmd).unwrap();
            let (ok, text) = read_response(&mut client).unwrap();
            assert_eq!(ok, cmd != "fail");
            assert_eq!(text, format!("echo: {cmd}"));
        }
        drop(client);
        assert_eq!(srv.join().unwrap(), vec![12, 4, 1 << 20]);
    }

    #[test]
    fn eof_inside_a_request_header_or_body_is_unexpected_eof() {
        for bytes in [vec![5u8, 0], frame(5, b"abc")] {
            let e = read_request(&mut Cursor::new(bytes)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[test]
    fn any_eof_while_awaiting_a_response_is_unexpected_eof() {
        for bytes in [vec![], vec![3u8], frame(10, b"\0abc")] {
            let e = read_response(&mut Cursor::new(bytes)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[test]
    fn oversize_frames_are_rejected_on_read() {
        let hdr = frame(MAX_FRAME as u32 + 1, b"");
        let e = read_request(&mut Cursor::new(hdr.clone())).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "frame too large");
        let e = read_response(&mut Cursor::new(hdr)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "frame too large");
    }

    #[test]
    fn max_size_request_is_accepted_and_oversize_writes_send_nothing() {
        let at_max = "a".repeat(MAX_FRAME);
        let mut v = Vec::new();
        write_request(&mut v, &at_max).unwrap();
        assert_eq!(
            read_request(&mut Cursor::new(v)).unwrap().unwrap().len(),
            MAX_FRAME
        );

        let mut v = Vec::new();
        let e = write_request(&mut v, &"a".repeat(MAX_FRAME + 1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // The status byte counts: MAX_FRAME bytes of text do not fit in a response.
        let e = write_response(&mut v, true, &at_max).unwrap_err();
        assert_eq!(e.to_string(), "frame too large");
        assert!(v.is_empty());
    }

    #[test]
    fn malformed_responses_are_invalid_data() {
        for bytes in [frame(0, b""), frame(2, b"\x07x")] {
            let e = read_response(&mut Cursor::new(bytes)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        }
    }

    #[test]
    fn invalid_utf8_is_converted_lossily() {
        let got = read_request(&mut Cursor::new(frame(3, b"a\xffb"))).unwrap();
        assert_eq!(got.as_deref(), Some("a\u{fffd}b"));
        let got = read_response(&mut Cursor::new(frame(3, b"\x01\xfe!"))).unwrap();
        assert_eq!(got, (false, "\u{fffd}!".into()));
    }

    #[test]
    fn default_socket_depends_on_root_and_xdg_runtime_dir() {
        let xdg = || Some(OsString::from("/run/user/1000"));
        assert_eq!(socket_for(0, xdg()), PathBuf::from("/run/sluice/cli.sock"));
        assert_eq!(
            socket_for(1000, xdg()),
            PathBuf::from("/run/user/1000/sluice/cli.sock")
        );
        assert_eq!(
            socket_for(1000, None),
            PathBuf::from("/tmp/sluice-1000/cli.sock")
        );
        assert_eq!(
            socket_for(1000, Some(OsString::new())),
            PathBuf::from("/tmp/sluice-1000/cli.sock")
        );
        assert!(default_cli_socket().ends_with("cli.sock"));
    }
}
