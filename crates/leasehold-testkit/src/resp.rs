//! Just enough RESP2 to send one command and render its reply as text.

use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `args` as one command to `addr` on a fresh connection and renders
/// the reply (see [`RedisServer::command`](crate::RedisServer::command)).
pub(crate) fn command(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<String> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    (&stream).write_all(&encode(args))?;
    render(&mut BufReader::new(&stream))
}

/// A RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply: strings and integers as they are, errors as
/// `(error) MESSAGE`, nil as `(nil)`, array elements one per line.
pub(crate) fn render(reader: &mut impl BufRead) -> io::Result<String> {
    let line = read_line(reader)?;
    let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
    match kind {
        "+" | ":" => Ok(rest.to_owned()),
        "-" => Ok(format!("(error) {rest}")),
        "$" => match length(rest)? {
            None => Ok("(nil)".to_owned()),
            Some(len) => {
                let mut bytes = vec![0; len + 2];
                reader.read_exact(&mut bytes)?;
                bytes.truncate(len);
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        },
        "*" => match length(rest)? {
            None => Ok("(nil)".to_owned()),
            Some(count) => {
                let items = (0..count)
                    .map(|_| render(reader))
                    .collect::<io::Result<Vec<_>>>()?;
                Ok(items.join("\n"))
            }
        },
        _ => Err(malformed(&line)),
    }
}

/// A line without its `\r\n`; EOF before one is an error.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut bytes = Vec::new();
    reader.read_until(b'\n', &mut bytes)?;
    if !bytes.ends_with(b"\r\n") {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed in the middle of a reply",
        ));
    }
    bytes.truncate(bytes.len() - 2);
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A bulk or array length; `-1` is nil.
fn length(text: &str) -> io::Result<Option<usize>> {
    if text == "-1" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| malformed(text))
}

fn malformed(text: &str) -> io::Error {
    io::Error::new(
        ErrorKind::InvalidData,
        format!("malformed RESP reply: {text:?}"),
    )
}
