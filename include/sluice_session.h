/*
 * sluice_session.h — the C API of Sluice's host stack (libsluice_session_c.so, crate
 * apps/session-c; docs/hoststack.md "C API").
 *
 * BSD-socket-shaped calls over the shared-memory FIFOs of Sluice's session layer: after
 * sluice_attach(), data moves between the application and Sluice through per-session rx/tx
 * FIFOs with no system call per message; a call enters the kernel only to sleep (on an
 * eventfd Sluice signals) when it must block, and for control (socket setup, close).
 *
 * Conventions:
 *  - Every function returns a value >= 0 on success and a negative errno on failure
 *    (-EAGAIN, -ECONNREFUSED, ...); errno is not set.
 *  - Socket handles and epoll handles are small integers of their own, not kernel file
 *    descriptors (pass them only to these functions).
 *  - Sockets block by default; sluice_set_nonblocking() (or SOCK_NONBLOCK in
 *    sluice_socket()/sluice_accept() flags) makes would-block calls return -EAGAIN.
 *  - One attachment per process. Calls from several threads are serialised by one lock,
 *    which a blocking call releases while it sleeps.
 *
 * Build: cc app.c -I<sluice>/include -L<sluice>/target/release -lsluice_session_c
 */
#ifndef SLUICE_SESSION_H
#define SLUICE_SESSION_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/epoll.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Attaches to the session layer's app socket (NULL: /run/sluice/app.sock) under `name`
 * (NULL: "sluice-c"). -EISCONN when already attached. */
int sluice_attach(const char *app_socket, const char *name);
/* Detaches: closes every socket (TCP connections still deliver queued data and FIN). */
int sluice_detach(void);

/* domain: AF_INET or AF_INET6; type: SOCK_STREAM or SOCK_DGRAM, optionally | SOCK_NONBLOCK. */
int sluice_socket(int domain, int type);
int sluice_set_nonblocking(int s, int on);
/* Unspecified address: any of Sluice's; port 0: an ephemeral port. TCP keeps the address
 * for sluice_listen(); UDP starts receiving at once. */
int sluice_bind(int s, const struct sockaddr *addr, socklen_t len);
int sluice_listen(int s, int backlog);
/* The accepted connection's handle; the peer in addr/len (both may be NULL). flags:
 * SOCK_NONBLOCK for the new socket. */
int sluice_accept(int s, struct sockaddr *addr, socklen_t *len, int flags);
/* TCP: waits for the handshake; non-blocking: -EINPROGRESS, then the socket becomes
 * writable (EPOLLOUT) and sluice_socket_error() tells 0 or ECONNREFUSED. UDP: fixes the peer. */
int sluice_connect(int s, const struct sockaddr *addr, socklen_t len);
/* The pending error (positive errno, 0 when none), cleared like SO_ERROR. */
int sluice_socket_error(int s);

/* TCP: up to n bytes, 0 at the end of the stream; UDP: one datagram (truncated to n). */
ssize_t sluice_read(int s, void *buf, size_t n);
/* TCP: as many bytes as fit in the tx FIFO (at least 1 unless non-blocking); UDP: one
 * datagram to the connected peer. */
ssize_t sluice_write(int s, const void *buf, size_t n);
ssize_t sluice_recvfrom(int s, void *buf, size_t n, struct sockaddr *addr, socklen_t *len);
/* UDP: one datagram to addr (an unbound socket is bound to an ephemeral port first). */
ssize_t sluice_sendto(int s, const void *buf, size_t n, const struct sockaddr *addr, socklen_t len);
/* Orderly close (TCP: FIN after the queued data). */
int sluice_close(int s);
/* peer == 0: the local address; otherwise the peer's. */
int sluice_getname(int s, int peer, struct sockaddr *addr, socklen_t *len);

/* epoll over Sluice sockets (struct epoll_event of <sys/epoll.h>): EPOLLIN, EPOLLOUT,
 * EPOLLRDHUP; EPOLLERR|EPOLLHUP after a reset. Level-triggered (EPOLLET is reported as
 * level-triggered). timeout_ms: -1 forever, 0 no wait. No system call while events are ready. */
int sluice_epoll_create(void);
int sluice_epoll_close(int ep);
int sluice_epoll_ctl(int ep, int op, int s, struct epoll_event *ev);
int sluice_epoll_wait(int ep, struct epoll_event *evs, int max, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
