//! The owner's line to its keeper: a `SOCK_SEQPACKET` socket pair. The owner sends the
//! descriptor of each file it may write (with the file's mapping id) and forgets it when
//! the mapping goes; the keeper holds them, so that after the owner's death it writes to
//! the very files the owner wrote, renamed or not, and never to a file that replaced one.
//!
//! Messages, 8 bytes each (kind, then the mapping id, little-endian):
//! - `Register(id)` with one descriptor (`SCM_RIGHTS`): mapping `id` writes this file.
//! - `Forget(id)`: mapping `id` is gone (closed for good, or its file deleted); the
//!   keeper closes the descriptor, so a deleted file's space is not held.
//! - `Bye`: the owner wrote everything back and is going away cleanly: the keeper exits
//!   without writing.
//! - `Started(pid, why)`, the one message the other way: the keeper runs, as process
//!   `pid`; `why` (the kind byte's neighbour) is 0, or the code of the reason its witness
//!   could not be made (`keeper::witness::Unwitnessed`: the segment is not kept).
//!
//! A message sent before the owner's death is delivered after it: the socket's queue
//! outlives the sender, and the keeper reads it to the end before it writes.
//!
//! Order: a mapping id is forgotten before it can be reused (`MappingTable` sends
//! `Forget` before it frees the id), and messages arrive in the order sent, so the
//! keeper's table is the owner's.

use std::io;
use std::os::unix::io::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::folio_meta::MappingId;

const REGISTER: u8 = 1;
const FORGET: u8 = 2;
const BYE: u8 = 3;
const STARTED: u8 = 4;

/// What the keeper receives.
#[derive(Debug)]
pub enum Message {
    Register(MappingId, OwnedFd),
    Forget(MappingId),
    Bye,
    /// The keeper's pid, and 0 or why it has no witness (`Unwitnessed::code`).
    Started(u32, u8),
}

/// The owner's end of the line, registered for forks (`segment::fork`) as soon as it
/// exists: a child the owner forks finds `/dev/null` at its number, so it can neither
/// send the keeper a `Register` or a `Bye` nor end the line (issue 42: a child that
/// setuids later would make the keeper write the owner's dirty pages into its own file,
/// or stop reading while the owner lives).
#[derive(Debug)]
pub struct OwnerEnd {
    socket: OwnedFd,
    /// After the socket: dropped once it is closed.
    _fork_guard: super::fork::Registered,
}

impl AsRawFd for OwnerEnd {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// A connected socket pair: (the owner's end, registered for forks, the keeper's end),
/// both close-on-exec.
///
/// Errors: `socketpair`'s; `fork::register`'s.
pub fn pair() -> io::Result<(OwnerEnd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: an out-array of two descriptors; the result is checked.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two new descriptors that nothing else owns.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let _fork_guard = super::fork::register(ours.as_fd())?;
    Ok((
        OwnerEnd {
            socket: ours,
            _fork_guard,
        },
        theirs,
    ))
}

/// The owner's end of the line.
#[derive(Debug)]
pub struct KeeperLink {
    socket: OwnerEnd,
    keeper_pid: u32,
    /// A send failed: the keeper is gone, and writes are no longer kept past a crash.
    lost: AtomicBool,
    /// Why the keeper has no witness of this process's credentials, if it said so at its
    /// start (`Started`): the segment is not kept for the next cache of its name.
    not_kept_because: Option<&'static str>,
}

impl KeeperLink {
    pub fn new(socket: OwnerEnd, keeper_pid: u32) -> KeeperLink {
        KeeperLink {
            socket,
            keeper_pid,
            lost: AtomicBool::new(false),
            not_kept_because: None,
        }
    }

    /// `new`, for a keeper that said at its start why the segment is not kept.
    pub fn not_kept(mut self, because: Option<&'static str>) -> KeeperLink {
        self.not_kept_because = because;
        self
    }

    /// Why the segment is not kept for the next cache of its name (`Started`), if so.
    pub fn not_kept_because(&self) -> Option<&'static str> {
        self.not_kept_because
    }

    pub fn keeper_pid(&self) -> u32 {
        self.keeper_pid
    }

    /// Mapping `id` writes the file open as `fd`.
    pub fn register(&self, id: MappingId, fd: RawFd) {
        self.send(REGISTER, id, Some(fd));
    }

    pub fn forget(&self, id: MappingId) {
        self.send(FORGET, id, None);
    }

    /// Everything is written back: the keeper may exit without writing.
    pub fn bye(&self) {
        self.send(BYE, MappingId(0), None);
    }

    fn send(&self, kind: u8, id: MappingId, fd: Option<RawFd>) {
        if let Err(e) = send(self.socket.as_raw_fd(), kind, id, fd) {
            if !self.lost.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "folio: the keeper (pid {}) is gone ({e}): writes not synced will not survive a crash of this process",
                    self.keeper_pid
                );
            }
        }
    }
}

/// The keeper tells its owner it runs, as process `pid`.
/// `why` is 0, or why its witness could not be made (module docs).
pub fn send_started(socket: RawFd, pid: u32, why: u8) -> io::Result<()> {
    send_with(socket, [STARTED, why], MappingId(pid), None)
}

fn send(socket: RawFd, kind: u8, id: MappingId, fd: Option<RawFd>) -> io::Result<()> {
    send_with(socket, [kind, 0], id, fd)
}

/// Sends `head` (the kind, and a byte of its own) with `id` and `fd`.
fn send_with(socket: RawFd, head: [u8; 2], id: MappingId, fd: Option<RawFd>) -> io::Result<()> {
    let mut body = [0u8; 8];
    body[..2].copy_from_slice(&head);
    body[4..8].copy_from_slice(&id.0.to_le_bytes());
    let mut iov = libc::iovec {
        iov_base: body.as_mut_ptr().cast::<libc::c_void>(),
        iov_len: body.len(),
    };
    // Room for one descriptor's control message, aligned as cmsghdr wants.
    let mut control = [0u64; 4];
    // SAFETY: all-zero is a valid msghdr; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        assert!(space <= std::mem::size_of_val(&control));
        msg.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` zeroed, aligned bytes, room for one
        // header and one descriptor (asserted).
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: `msg` and what it points at are valid for the call.
        let sent = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What one receive found.
#[derive(Debug)]
pub enum Received {
    Message(Message),
    /// Nothing queued now (a non-blocking receive).
    Empty,
    /// The owner's end is closed: every message has been read.
    Closed,
}

/// Receives one message, waiting for it.
pub fn receive(socket: RawFd) -> io::Result<Received> {
    receive_with(socket, 0)
}

/// Receives one message if one is queued; `Empty` at once otherwise.
pub fn try_receive(socket: RawFd) -> io::Result<Received> {
    receive_with(socket, libc::MSG_DONTWAIT)
}

fn receive_with(socket: RawFd, flags: libc::c_int) -> io::Result<Received> {
    let mut body = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: body.as_mut_ptr().cast::<libc::c_void>(),
        iov_len: body.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: all-zero is a valid msghdr; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let flags = libc::MSG_CMSG_CLOEXEC | flags;
    let got = loop {
        // SAFETY: `msg` and what it points at are valid for the call.
        let got = unsafe { libc::recvmsg(socket, &mut msg, flags) };
        if got >= 0 {
            break got as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Received::Empty),
            _ => return Err(e),
        }
    };
    if got == 0 {
        return Ok(Received::Closed);
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; CMSG_FIRSTHDR reads
    // only inside them and returns null when there is no header.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            None
        } else {
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
            Some(OwnedFd::from_raw_fd(fd))
        }
    };
    let id = MappingId(u32::from_le_bytes(body[4..8].try_into().expect("4 bytes")));
    let message = match (body[0], fd) {
        (REGISTER, Some(fd)) => Message::Register(id, fd),
        (FORGET, _) => Message::Forget(id),
        (BYE, _) => Message::Bye,
        (STARTED, _) => Message::Started(id.0, body[1]),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "folio: a malformed message from the owner",
            ))
        }
    };
    Ok(Received::Message(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_descriptors_arrive_in_order_after_the_sender_is_gone() {
        let (owner, keeper) = pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        let link = KeeperLink::new(owner, 0);
        link.register(MappingId(7), file.as_raw_fd());
        link.forget(MappingId(7));
        link.bye();
        drop(link);
        let fd = keeper.as_raw_fd();
        match try_receive(fd).unwrap() {
            Received::Message(Message::Register(MappingId(7), got)) => {
                let a = std::fs::File::from(got).metadata().unwrap();
                let b = file.metadata().unwrap();
                use std::os::unix::fs::MetadataExt;
                assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            try_receive(fd).unwrap(),
            Received::Message(Message::Forget(MappingId(7)))
        ));
        assert!(matches!(
            try_receive(fd).unwrap(),
            Received::Message(Message::Bye)
        ));
        assert!(matches!(try_receive(fd).unwrap(), Received::Closed));
    }
}
