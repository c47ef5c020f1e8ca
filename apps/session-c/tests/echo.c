/* The C API's test program (bin/sluice/tests/hoststack.rs::c_api_echo_with_the_kernel).
 *   echo <app-socket> client <ipv4> <port> <bytes>   stream <bytes> to a kernel echo server
 *       through epoll (non-blocking), check every echoed byte; prints "ok <bytes>"
 *   echo <app-socket> server <port>                  accept one connection (blocking),
 *       echo it until the peer's FIN; prints "ready", then "echoed <bytes>"
 *   echo <app-socket> push <port> <bytes>           accept one connection (blocking), write
 *       <bytes> of the pattern and detach without closing it (the data and a FIN must
 *       still reach the peer); prints "ready"
 */
#include "sluice_session.h"
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pat(unsigned long i) { return (unsigned char)(i * 131 + (i >> 9)); }

static int die(const char *what, long r) {
    fprintf(stderr, "echo: %s: %s\n", what, strerror((int)-r));
    return 1;
}

static int client(const char *ip, int port, unsigned long total) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    int s = sluice_socket(AF_INET, SOCK_STREAM);
    if (s < 0) return die("socket", s);
    long r = sluice_connect(s, (struct sockaddr *)&a, sizeof a);
    if (r < 0) return die("connect", r);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if ((r = sluice_getname(s, 0, (struct sockaddr *)&me, &ml)) < 0) return die("getname", r);
    sluice_set_nonblocking(s, 1);
    int ep = sluice_epoll_create();
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = 42};
    if ((r = sluice_epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev)) < 0) return die("epoll_ctl", r);
    unsigned long sent = 0, got = 0;
    unsigned char out[3001], in[4096];
    while (got < total) {
        struct epoll_event evs[4];
        int n = sluice_epoll_wait(ep, evs, 4, 5000);
        if (n < 0) return die("epoll_wait", n);
        if (n == 0) { fprintf(stderr, "echo: timeout at %lu/%lu\n", got, total); return 1; }
        if (evs[0].data.u64 != 42) { fprintf(stderr, "echo: bad event data\n"); return 1; }
        if ((evs[0].events & EPOLLOUT) && sent < total) {
            /* Writes of varying size (1..3001 bytes). */
            size_t k = 1 + (sent * 7) % sizeof out;
            if (k > total - sent) k = total - sent;
            for (size_t i = 0; i < k; i++) out[i] = pat(sent + i);
            r = sluice_write(s, out, k);
            if (r < 0 && r != -EAGAIN) return die("write", r);
            if (r > 0) sent += r;
            if (sent == total) {
                ev.events = EPOLLIN;
                sluice_epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev);
            }
        }
        if (evs[0].events & EPOLLIN) {
            r = sluice_read(s, in, sizeof in);
            if (r == 0) { fprintf(stderr, "echo: early end of stream\n"); return 1; }
            if (r < 0 && r != -EAGAIN) return die("read", r);
            for (long i = 0; i < r; i++)
                if (in[i] != pat(got + i)) {
                    fprintf(stderr, "echo: byte %lu differs\n", got + i);
                    return 1;
                }
            if (r > 0) got += r;
        }
    }
    sluice_epoll_close(ep);
    sluice_close(s);
    printf("ok %lu from port %d\n", got, ntohs(me.sin_port));
    return 0;
}

static int server(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int l = sluice_socket(AF_INET, SOCK_STREAM);
    long r = sluice_bind(l, (struct sockaddr *)&a, sizeof a);
    if (r < 0) return die("bind", r);
    if ((r = sluice_listen(l, 16)) < 0) return die("listen", r);
    printf("ready\n");
    fflush(stdout);
    struct sockaddr_in peer;
    socklen_t pl = sizeof peer;
    int c = sluice_accept(l, (struct sockaddr *)&peer, &pl, 0);
    if (c < 0) return die("accept", c);
    unsigned long n = 0;
    char buf[8192];
    for (;;) {
        ssize_t k = sluice_read(c, buf, sizeof buf);
        if (k == 0) break;
        if (k < 0) return die("read", k);
        for (ssize_t off = 0; off < k;) {
            ssize_t w = sluice_write(c, buf + off, k - off);
            if (w < 0) return die("write", w);
            off += w;
        }
        n += k;
    }
    sluice_close(c);
    sluice_close(l);
    char ip[32];
    inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    printf("echoed %lu to %s\n", n, ip);
    return 0;
}

static int push(int port, unsigned long total) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int l = sluice_socket(AF_INET, SOCK_STREAM);
    long r = sluice_bind(l, (struct sockaddr *)&a, sizeof a);
    if (r < 0) return die("bind", r);
    if ((r = sluice_listen(l, 16)) < 0) return die("listen", r);
    printf("ready\n");
    fflush(stdout);
    int c = sluice_accept(l, 0, 0, 0);
    if (c < 0) return die("accept", c);
    unsigned char buf[4096];
    for (unsigned long sent = 0; sent < total;) {
        size_t k = total - sent < sizeof buf ? total - sent : sizeof buf;
        for (size_t i = 0; i < k; i++) buf[i] = pat(sent + i);
        ssize_t w = sluice_write(c, buf, k);
        if (w < 0) return die("write", w);
        sent += w;
    }
    return 0; /* main detaches with `c' still open */
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: echo <app-socket> client|server ...\n"); return 2; }
    long r = sluice_attach(argv[1], "c-echo");
    if (r < 0) return die("attach", r);
    if (!strcmp(argv[2], "client") && argc == 6)
        r = client(argv[3], atoi(argv[4]), strtoul(argv[5], 0, 10));
    else if (!strcmp(argv[2], "server") && argc == 4)
        r = server(atoi(argv[3]));
    else if (!strcmp(argv[2], "push") && argc == 5)
        r = push(atoi(argv[3]), strtoul(argv[4], 0, 10));
    else
        r = 2;
    /* Let the FIN go out before the process exits. */
    sluice_detach();
    return (int)r;
}
