/* The thin C layer between Sluice's dpdk plugin and Debian's libdpdk (22.11).
 *
 * DPDK's fast-path functions (rte_eth_rx_burst, rte_eth_tx_burst, rte_pktmbuf_*) are static
 * inline functions over structures whose layout changes between releases, so Rust cannot
 * call them directly without generated bindings. This file compiles them against the
 * installed headers and exposes a small, stable, per-burst ABI (sd_*): plain integers,
 * opaque pointers and byte arrays. Nothing here keeps state except the link-event
 * registrations; every function returns 0 or a count on success and a negative errno
 * otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_memcpy.h>
#include <rte_prefetch.h>
#include <rte_spinlock.h>
#include <rte_version.h>

/* ---- EAL ---------------------------------------------------------------------------- */

/* rte_eal_init, keeping the calling thread's CPU affinity (EAL pins the main lcore's thread;
 * Sluice decides its own pinning). Returns 0 or -rte_errno. */
int sd_eal_init(int argc, char **argv)
{
    cpu_set_t saved;
    int have = pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0;
    int r = rte_eal_init(argc, argv);
    int err = rte_errno;
    if (have)
        pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
    if (r < 0)
        return -(err ? err : EINVAL);
    return 0;
}

const char *sd_strerror(int err)
{
    return rte_strerror(err < 0 ? -err : err);
}

const char *sd_runtime_dir(void)
{
    return rte_eal_get_runtime_dir();
}

const char *sd_version(void)
{
    return rte_version();
}

/* Makes the calling (non-EAL) thread a registered lcore so the mempool caches work for it.
 * Returns its lcore id, or -1 when none is left (it then works without a cache). */
int sd_thread_register(void)
{
    if (rte_lcore_id() != LCORE_ID_ANY)
        return (int)rte_lcore_id();
    if (rte_thread_register() < 0)
        return -1;
    return (int)rte_lcore_id();
}

void sd_thread_unregister(void)
{
    rte_thread_unregister();
}

/* Hot-plugs a device from a devargs string (`net_null0,size=64`, `0000:02:00.1`). */
int sd_dev_probe(const char *devargs)
{
    int r = rte_dev_probe(devargs);
    return r < 0 ? r : 0;
}

int sd_port_by_name(const char *name, uint16_t *port)
{
    return rte_eth_dev_get_port_by_name(name, port);
}

int sd_port_valid(uint16_t port)
{
    return rte_eth_dev_is_valid_port(port);
}

uint16_t sd_max_ports(void)
{
    return RTE_MAX_ETHPORTS;
}

/* ---- port information ---------------------------------------------------------------- */

struct sd_port_info {
    char driver[64];
    char dev_name[128];
    char bus[32];
    uint8_t mac[6];
    uint16_t max_rx_queues;
    uint16_t max_tx_queues;
    uint16_t rx_desc_max, rx_desc_min;
    uint16_t tx_desc_max, tx_desc_min;
    uint16_t mtu;
    uint16_t max_mtu;
    uint32_t speed_capa;
    uint64_t rss_offloads;
    int32_t numa;
    uint32_t lsc_intr;
    int32_t switch_port; /* -1: not a representor */
};

int sd_port_info(uint16_t port, struct sd_port_info *o)
{
    struct rte_eth_dev_info di;
    struct rte_ether_addr mac;
    memset(o, 0, sizeof(*o));
    int r = rte_eth_dev_info_get(port, &di);
    if (r != 0)
        return r;
    snprintf(o->driver, sizeof(o->driver), "%s", di.driver_name ? di.driver_name : "?");
    if (di.device) {
        snprintf(o->dev_name, sizeof(o->dev_name), "%s", rte_dev_name(di.device));
        const struct rte_bus *b = rte_dev_bus(di.device);
        if (b)
            snprintf(o->bus, sizeof(o->bus), "%s", rte_bus_name(b));
    }
    if (rte_eth_macaddr_get(port, &mac) == 0)
        memcpy(o->mac, mac.addr_bytes, 6);
    o->max_rx_queues = di.max_rx_queues;
    o->max_tx_queues = di.max_tx_queues;
    o->rx_desc_max = di.rx_desc_lim.nb_max;
    o->rx_desc_min = di.rx_desc_lim.nb_min;
    o->tx_desc_max = di.tx_desc_lim.nb_max;
    o->tx_desc_min = di.tx_desc_lim.nb_min;
    uint16_t mtu = 0;
    o->mtu = rte_eth_dev_get_mtu(port, &mtu) == 0 ? mtu : 1500;
    o->max_mtu = di.max_mtu;
    o->speed_capa = di.speed_capa;
    o->rss_offloads = di.flow_type_rss_offloads;
    o->numa = rte_eth_dev_socket_id(port);
    o->lsc_intr = (di.dev_flags && (*di.dev_flags & RTE_ETH_DEV_INTR_LSC)) ? 1 : 0;
    o->switch_port = (di.switch_info.domain_id != RTE_ETH_DEV_SWITCH_DOMAIN_ID_INVALID)
                         ? (int32_t)di.switch_info.port_id
                         : -1;
    return 0;
}

/* ---- port setup ---------------------------------------------------------------------- */

struct sd_port_conf {
    uint16_t n_rxq, n_txq;
    uint16_t n_rxd, n_txd;
    uint64_t rss_hf; /* 0: no RSS */
    uint32_t lsc_intr;
    uint32_t promisc;
};

/* Configures the port with the queues of `c` (descriptor counts adjusted to the device's
 * limits, written back), sets up every queue on `mp` and starts it. On failure, returns a
 * negative errno and names the step in `step`. */
int sd_port_setup(uint16_t port, struct sd_port_conf *c, struct rte_mempool *mp,
                  const char **step)
{
    struct rte_eth_conf conf;
    memset(&conf, 0, sizeof(conf));
    if (c->rss_hf) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = c->rss_hf;
    }
    conf.intr_conf.lsc = c->lsc_intr ? 1 : 0;
    int socket = rte_eth_dev_socket_id(port);
    if (socket < 0)
        socket = SOCKET_ID_ANY;
    int r;
    *step = "rte_eth_dev_configure";
    if ((r = rte_eth_dev_configure(port, c->n_rxq, c->n_txq, &conf)) != 0)
        return r;
    *step = "rte_eth_dev_adjust_nb_rx_tx_desc";
    if ((r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &c->n_rxd, &c->n_txd)) != 0)
        return r;
    *step = "rte_eth_rx_queue_setup";
    for (uint16_t q = 0; q < c->n_rxq; q++)
        if ((r = rte_eth_rx_queue_setup(port, q, c->n_rxd, socket, NULL, mp)) != 0)
            return r;
    *step = "rte_eth_tx_queue_setup";
    for (uint16_t q = 0; q < c->n_txq; q++)
        if ((r = rte_eth_tx_queue_setup(port, q, c->n_txd, socket, NULL)) != 0)
            return r;
    *step = "rte_eth_dev_start";
    if ((r = rte_eth_dev_start(port)) != 0)
        return r;
    if (c->promisc) {
        *step = "rte_eth_promiscuous_enable";
        r = rte_eth_promiscuous_enable(port);
        /* Virtual devices without a MAC filter say ENOTSUP: nothing to open. */
        if (r != 0 && r != -ENOTSUP)
            return r;
    }
    *step = "";
    return 0;
}

void sd_port_close(uint16_t port)
{
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
}

void sd_eal_cleanup(void)
{
    rte_eal_cleanup();
}

/* ---- link state ---------------------------------------------------------------------- */

struct sd_link {
    uint32_t speed_mbps;
    uint8_t up;
    uint8_t full_duplex;
    uint8_t autoneg;
};

int sd_link_get(uint16_t port, struct sd_link *o)
{
    struct rte_eth_link l;
    memset(&l, 0, sizeof(l));
    int r = rte_eth_link_get_nowait(port, &l);
    if (r != 0)
        return r;
    o->speed_mbps = l.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : l.link_speed;
    o->up = l.link_status ? 1 : 0;
    o->full_duplex = l.link_duplex ? 1 : 0;
    o->autoneg = l.link_autoneg ? 1 : 0;
    return 0;
}

typedef void (*sd_lsc_fn)(void *arg);

struct lsc_reg {
    sd_lsc_fn fn;
    void *arg;
};

static struct lsc_reg *lsc_regs[RTE_MAX_ETHPORTS];

static int lsc_cb(uint16_t port, enum rte_eth_event_type ev, void *arg, void *ret)
{
    (void)port;
    (void)ev;
    (void)ret;
    struct lsc_reg *r = arg;
    r->fn(r->arg);
    return 0;
}

/* Calls fn(arg) from DPDK's interrupt thread on every link status change of `port`. */
int sd_lsc_register(uint16_t port, sd_lsc_fn fn, void *arg)
{
    if (port >= RTE_MAX_ETHPORTS || lsc_regs[port])
        return -EINVAL;
    struct lsc_reg *r = malloc(sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->fn = fn;
    r->arg = arg;
    int e = rte_eth_dev_callback_register(port, RTE_ETH_EVENT_INTR_LSC, lsc_cb, r);
    if (e != 0) {
        free(r);
        return e;
    }
    lsc_regs[port] = r;
    return 0;
}

void sd_lsc_unregister(uint16_t port)
{
    if (port >= RTE_MAX_ETHPORTS || !lsc_regs[port])
        return;
    /* Waits for a running callback to finish (DPDK retries while it is busy). */
    while (rte_eth_dev_callback_unregister(port, RTE_ETH_EVENT_INTR_LSC, lsc_cb, lsc_regs[port]) ==
           -EAGAIN)
        ;
    free(lsc_regs[port]);
    lsc_regs[port] = NULL;
}

/* ---- statistics ---------------------------------------------------------------------- */

struct sd_stats {
    uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};

int sd_stats_get(uint16_t port, struct sd_stats *o)
{
    struct rte_eth_stats s;
    int r = rte_eth_stats_get(port, &s);
    if (r != 0)
        return r;
    o->ipackets = s.ipackets;
    o->opackets = s.opackets;
    o->ibytes = s.ibytes;
    o->obytes = s.obytes;
    o->imissed = s.imissed;
    o->ierrors = s.ierrors;
    o->oerrors = s.oerrors;
    o->rx_nombuf = s.rx_nombuf;
    return 0;
}

/* Extended statistics: names (64 bytes each, NUL-terminated) and values of up to `n`.
 * Returns how many the device has (call again with a larger `n` when that is more). */
int sd_xstats(uint16_t port, char *names, uint64_t *values, int n)
{
    int total = rte_eth_xstats_get_names(port, NULL, 0);
    if (total < 0 || n < total)
        return total;
    struct rte_eth_xstat_name *nm = calloc((size_t)total, sizeof(*nm));
    struct rte_eth_xstat *xs = calloc((size_t)total, sizeof(*xs));
    int r = -ENOMEM;
    if (nm && xs) {
        int a = rte_eth_xstats_get_names(port, nm, (unsigned)total);
        int b = rte_eth_xstats_get(port, xs, (unsigned)total);
        r = (a < 0) ? a : (b < 0) ? b : (a < b ? a : b);
        for (int i = 0; i < r; i++) {
            snprintf(names + (size_t)i * 64, 64, "%s", nm[i].name);
            values[i] = xs[i].value;
        }
    }
    free(nm);
    free(xs);
    return r;
}

/* ---- Sluice's buffer arena ----------------------------------------------------------- */

/* Where the Sluice buffers are: buffer i's headroom starts at base + i * stride and its
 * headroom + data are buf_len bytes. Set once by sd_zc_init before any transmit. */
static struct {
    uint8_t *base;
    uint64_t stride;
    uint16_t headroom; /* Sluice's headroom in front of the data area */
    uint16_t buf_len;  /* headroom + data area */
} zc;

void sd_zc_init(uint8_t *base, uint64_t stride, uint16_t headroom, uint16_t data_size)
{
    zc.base = base;
    zc.stride = stride;
    zc.headroom = headroom;
    zc.buf_len = (uint16_t)(headroom + data_size);
}

/* ---- mbuf pools ---------------------------------------------------------------------- */

/* A pool of `n` mbufs. `kind` 2: a pool for sd_zrx_attach (room for a Sluice buffer index,
 * and the data room the Sluice buffers give, which PMDs read from the pool to size their
 * receive buffers); 0: a plain pool. */
struct rte_mempool *sd_pool_create(const char *name, unsigned n, unsigned cache, int socket,
                                   int kind)
{
    uint16_t priv = kind == 2 ? RTE_MBUF_PRIV_ALIGN : 0;
    uint16_t room = RTE_MBUF_DEFAULT_BUF_SIZE;
    if (kind == 2 && zc.base)
        room = (uint16_t)(zc.buf_len - zc.headroom + RTE_PKTMBUF_HEADROOM);
    return rte_pktmbuf_pool_create(name, n, cache, priv, room,
                                   socket < 0 ? SOCKET_ID_ANY : socket);
}

unsigned sd_pool_avail(const struct rte_mempool *mp)
{
    return rte_mempool_avail_count(mp);
}

unsigned sd_pool_in_use(const struct rte_mempool *mp)
{
    return rte_mempool_in_use_count(mp);
}

unsigned sd_pool_size(const struct rte_mempool *mp)
{
    return mp->size;
}

/* Bytes of packet data one mbuf of `mp` holds. */
uint16_t sd_pool_data_room(struct rte_mempool *mp)
{
    return (uint16_t)(rte_pktmbuf_data_room_size(mp) - RTE_PKTMBUF_HEADROOM);
}

struct fill_arg {
    const uint8_t *bytes;
    const uint16_t *lens;
    unsigned n, next;
    size_t off;
};

static void fill_one(struct rte_mempool *mp, void *opaque, void *obj, unsigned idx)
{
    (void)mp;
    (void)idx;
    struct fill_arg *a = opaque;
    struct rte_mbuf *m = obj;
    if (a->next == a->n) {
        a->next = 0;
        a->off = 0;
    }
    uint16_t len = a->lens[a->next];
    uint16_t room = (uint16_t)(m->buf_len - RTE_PKTMBUF_HEADROOM);
    memcpy((uint8_t *)m->buf_addr + RTE_PKTMBUF_HEADROOM, a->bytes + a->off,
           len < room ? len : room);
    a->off += len;
    a->next++;
}

/* Writes `n` frames (concatenated in `bytes`, lengths in `lens`) round-robin into the data
 * area of every mbuf of `mp`, free or not: what a PMD that does not write packet data
 * (net_null) then "receives". For benchmarks. */
void sd_pool_fill(struct rte_mempool *mp, const uint8_t *bytes, const uint16_t *lens, unsigned n)
{
    struct fill_arg a = {bytes, lens, n, 0, 0};
    if (n)
        rte_mempool_obj_iter(mp, fill_one, &a);
}

/* ---- fast path ----------------------------------------------------------------------- */

/* Packets per PMD call and per mempool request: a request larger than the per-lcore cache
 * bypasses it and cycles through the whole pool (cold memory); 32 is also what vector PMDs
 * return at most per call. */
#define SD_BURST 32

/* Receives up to `n` packets, in bursts of SD_BURST while the queue fills them. */
uint16_t sd_rx_burst(uint16_t port, uint16_t q, struct rte_mbuf **m, uint16_t n)
{
    uint16_t got = 0;
    while (got < n) {
        uint16_t want = (uint16_t)(n - got) < SD_BURST ? (uint16_t)(n - got) : SD_BURST;
        uint16_t k = rte_eth_rx_burst(port, q, m + got, want);
        got = (uint16_t)(got + k);
        if (k < want)
            break;
    }
    return got;
}

/* ---- zero-copy receive ----------------------------------------------------------------
 *
 * The receive pool's mbufs carry Sluice buffers instead of their own data room: buf_addr is
 * RTE_PKTMBUF_HEADROOM bytes in front of a Sluice buffer's data area (inside Sluice's larger
 * headroom), so a device writes a packet where Sluice expects it, and the buffer's index is in
 * the mbuf's private area. On receive, sd_rx_take hands that buffer to Sluice and attaches a
 * fresh one in its place (the mbuf is still direct: DPDK frees it as any other); no byte is
 * copied. Transmit does the reverse (sd_tx): it takes an mbuf of the same pool, attaches the
 * packet's Sluice buffer to it and gives the buffer the mbuf carried back to Sluice. So the
 * pool always holds as many Sluice buffers as it has mbufs, they are the plugin's for the life
 * of the process, and DPDK frees these mbufs the cheap way (direct, one segment: no detach,
 * no callback, from any thread). Mbufs of other pools and multi-segment packets are copied. */

static struct rte_mempool *zrx_pool;

static inline uint32_t zrx_idx(struct rte_mbuf *m)
{
    return *(uint32_t *)rte_mbuf_to_priv(m);
}

static inline void zrx_set(struct rte_mbuf *m, uint32_t idx)
{
    uint8_t *buf = zc.base + (uint64_t)idx * zc.stride + zc.headroom - RTE_PKTMBUF_HEADROOM;
    m->buf_addr = buf;
    rte_mbuf_iova_set(m, (rte_iova_t)(uintptr_t)buf);
    m->buf_len = (uint16_t)(zc.buf_len - zc.headroom + RTE_PKTMBUF_HEADROOM);
    *(uint32_t *)rte_mbuf_to_priv(m) = idx;
}

struct zrx_arg {
    const uint32_t *idx;
    unsigned n, next;
};

static void zrx_attach_one(struct rte_mempool *mp, void *opaque, void *obj, unsigned i)
{
    (void)mp;
    (void)i;
    struct zrx_arg *a = opaque;
    struct rte_mbuf *m = obj;
    zrx_set(m, a->idx[a->next++]);
    rte_pktmbuf_reset_headroom(m);
}

/* Makes `mp` (every mbuf free, created with sd_pool_create(.., rx = 2)) a zero-copy receive
 * pool: mbuf i carries Sluice buffer idx[i]. `n` must be the pool's size. */
int sd_zrx_attach(struct rte_mempool *mp, const uint32_t *idx, unsigned n)
{
    if (n != mp->size || rte_mempool_in_use_count(mp) != 0 || zc.base == NULL)
        return -EINVAL;
    struct zrx_arg a = {idx, n, 0};
    rte_mempool_obj_iter(mp, zrx_attach_one, &a);
    zrx_pool = mp;
    return 0;
}

/* Takes received packets m[0..n) into Sluice buffers. On entry buf[i] is a fresh Sluice
 * buffer for packet i; on return buf[i] is the buffer holding packet i (its first `cap`
 * bytes), which starts `off[i]` bytes after the data area's start and is `len[i]` bytes long
 * in all (more than `cap`: the caller reads the rest with sd_mbuf_read). A zero-copy
 * packet's buffer is the one the mbuf carried and the fresh one takes its place; any other
 * is copied into the fresh one. */
void sd_rx_take(struct rte_mbuf **m, uint16_t n, uint32_t *buf, uint32_t cap, int16_t *off,
                uint32_t *len)
{
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *s = m[i];
        len[i] = s->pkt_len;
        /* Only a direct, unshared mbuf carries its own Sluice buffer alone: an indirect one
         * points into another mbuf's, a shared one's buffer is still read elsewhere. */
        if (s->pool == zrx_pool && s->nb_segs == 1 && RTE_MBUF_DIRECT(s) &&
            rte_mbuf_refcnt_read(s) == 1) {
            uint32_t old = zrx_idx(s);
            off[i] = (int16_t)(s->data_off - RTE_PKTMBUF_HEADROOM);
            zrx_set(s, buf[i]);
            buf[i] = old;
            continue;
        }
        uint8_t *dst = zc.base + (uint64_t)buf[i] * zc.stride + zc.headroom;
        uint32_t o = 0;
        off[i] = 0;
        while (s && o < cap) {
            uint32_t k = s->data_len;
            if (k > cap - o)
                k = cap - o;
            rte_memcpy(dst + o, rte_pktmbuf_mtod(s, const void *), k);
            o += k;
            s = s->next;
        }
    }
}

/* Copies `len` bytes of packet `m` from offset `off` to `dst`; returns the bytes copied. */
uint32_t sd_mbuf_read(const struct rte_mbuf *m, uint32_t off, uint8_t *dst, uint32_t len)
{
    uint32_t w = 0;
    for (const struct rte_mbuf *s = m; s && w < len; s = s->next) {
        if (off >= s->data_len) {
            off -= s->data_len;
            continue;
        }
        uint32_t k = s->data_len - off;
        if (k > len - w)
            k = len - w;
        memcpy(dst + w, rte_pktmbuf_mtod_offset(s, const uint8_t *, off), k);
        w += k;
        off = 0;
    }
    return w;
}

/* Frees received mbufs: single-segment direct mbufs of the zero-copy receive pool go back
 * raw (they are as DPDK requires a free mbuf: refcnt 1, no next segment), in one request;
 * the rest through rte_pktmbuf_free_bulk. */
void sd_free_bulk(struct rte_mbuf **m, uint16_t n)
{
    struct rte_mbuf *raw[256], *other[256];
    unsigned nr = 0, no = 0;
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *x = m[i];
        if (x->pool == zrx_pool && x->nb_segs == 1 && RTE_MBUF_DIRECT(x) &&
            rte_mbuf_refcnt_read(x) == 1 && nr < 256)
            raw[nr++] = x;
        else if (no < 256)
            other[no++] = x;
        else
            rte_pktmbuf_free(x);
    }
    if (nr)
        rte_mempool_put_bulk(zrx_pool, (void **)raw, nr);
    if (no)
        rte_pktmbuf_free_bulk(other, no);
}

#define SD_MAX_TX 256

/* Status of each packet handed to sd_tx. */
enum { SD_TX_SENT = 0, SD_TX_NO_MBUF = 1, SD_TX_FULL = 2, SD_TX_COPIED = 3 };

/* Builds the mbuf of one packet by copying: `head` comes raw from the pool. Returns 0, or -1
 * when its chain could not be allocated (`head` is then freed). */
static int tx_copy(struct rte_mempool *mp, struct rte_mbuf *head, uint16_t room,
                   const uint8_t *const *seg, const uint16_t *seg_len, uint16_t first,
                   uint16_t end)
{
    struct rte_mbuf *cur = head;
    uint32_t total = 0;
    rte_pktmbuf_reset(head);
    for (uint16_t j = first; j < end; j++) {
        const uint8_t *src = seg[j];
        uint32_t left = seg_len[j];
        while (left > 0) {
            if (cur->data_len == room) {
                struct rte_mbuf *nm = rte_pktmbuf_alloc(mp);
                if (!nm) {
                    rte_pktmbuf_free(head);
                    return -1;
                }
                cur->next = nm;
                head->nb_segs++;
                cur = nm;
            }
            uint32_t k = (uint32_t)(room - cur->data_len);
            if (k > left)
                k = left;
            rte_memcpy(rte_pktmbuf_mtod_offset(cur, uint8_t *, cur->data_len), src, k);
            cur->data_len = (uint16_t)(cur->data_len + k);
            src += k;
            left -= k;
            total += k;
        }
    }
    head->pkt_len = total;
    return 0;
}

/* `n` raw mbufs of `mp` into m[], in requests the per-lcore cache serves; a slot the pool
 * could not fill is NULL. */
static void get_raw(struct rte_mempool *mp, struct rte_mbuf **m, uint16_t n)
{
    for (uint16_t a = 0; a < n; a = (uint16_t)(a + SD_BURST)) {
        uint16_t k = (uint16_t)(n - a) < SD_BURST ? (uint16_t)(n - a) : SD_BURST;
        if (rte_mempool_get_bulk(mp, (void **)(m + a), k) != 0) {
            /* The pool is short: as many as there are, one by one. */
            for (uint16_t i = a; i < n; i++)
                m[i] = rte_mbuf_raw_alloc(mp);
            return;
        }
    }
}

/* Transmits `npkts` packets on queue `q`. Packet i is `nseg[i]` consecutive entries of
 * `seg`/`seg_len`/`seg_idx` (a Sluice buffer chain: data pointers, lengths, buffer indices).
 * With `zc` (and a zero-copy pool attached), a single-buffer packet goes out in its own
 * Sluice buffer, swapped into an mbuf of that pool, whose previous buffer is returned in
 * `freed` (`*nfreed` of them: the caller's now). Anything else, and such a packet when that
 * pool has no mbuf left, is copied into mbufs of `mp` (an mbuf chain when longer than one). `status[i]` says what happened to packet i: SENT
 * (its buffer is DPDK's now), COPIED (sent, the buffer is still the caller's), NO_MBUF or
 * FULL (not sent, the buffer is still the caller's). Returns the number sent. */
uint16_t sd_tx(uint16_t port, uint16_t q, struct rte_mempool *mp, const uint8_t *const *seg,
               const uint16_t *seg_len, const uint32_t *seg_idx, const uint16_t *nseg,
               uint16_t npkts, int zc_ok, uint8_t *status, uint32_t *freed, uint16_t *nfreed)
{
    struct rte_mbuf *m[SD_MAX_TX], *za[SD_MAX_TX];
    uint32_t olds[SD_MAX_TX];
    uint16_t idx[SD_MAX_TX]; /* which packet each built mbuf carries */
    uint16_t built = 0, s = 0, nz = 0, zused = 0;
    *nfreed = 0;
    if (npkts > SD_MAX_TX)
        npkts = SD_MAX_TX;
    uint16_t room = (uint16_t)(rte_pktmbuf_data_room_size(mp) - RTE_PKTMBUF_HEADROOM);
    uint16_t zroom = (uint16_t)(zc.buf_len - zc.headroom + RTE_PKTMBUF_HEADROOM);
    /* One mbuf per packet up front: of the zero-copy pool when zero copy is on (nearly every
     * packet takes one; unused ones go back at the end and a copied packet takes one of `mp`),
     * else of `mp`. */
    int zon = zc_ok && zrx_pool;
    get_raw(zon ? zrx_pool : mp, za, npkts);
    if (zon)
        nz = npkts;
    for (uint16_t i = 0; i < npkts; i++) {
        uint16_t first = s;
        s = (uint16_t)(s + nseg[i]);
        struct rte_mbuf *head = NULL;
        if (nz && nseg[i] == 1) {
            const uint8_t *b =
                zc.base + (uint64_t)seg_idx[first] * zc.stride + zc.headroom - RTE_PKTMBUF_HEADROOM;
            if (seg[first] >= b && seg[first] + seg_len[first] <= b + zroom) {
                head = za[zused];
                za[zused++] = NULL;
            }
            /* The zero-copy pool may have had no mbuf for it (they wait in devices' tx rings
             * or hold received packets): then the packet is copied into `mp` below. */
            if (head) {
                olds[built] = zrx_idx(head);
                zrx_set(head, seg_idx[first]);
                head->data_off = (uint16_t)(seg[first] - b);
                head->data_len = seg_len[first];
                head->pkt_len = seg_len[first];
                head->ol_flags = 0;
                status[i] = SD_TX_SENT;
            }
        }
        if (!head) {
            head = zon ? rte_mbuf_raw_alloc(mp) : za[i];
            if (!head || tx_copy(mp, head, room, seg, seg_len, first, s) != 0) {
                status[i] = SD_TX_NO_MBUF;
                continue;
            }
            status[i] = SD_TX_COPIED;
        }
        m[built] = head;
        idx[built] = i;
        built++;
    }
    /* Zero-copy mbufs taken but not used (packets that were copied), back raw. */
    for (uint16_t k = zused; k < nz; k++)
        if (za[k])
            rte_mempool_put(zrx_pool, za[k]);
    uint16_t sent = built ? rte_eth_tx_burst(port, q, m, built) : 0;
    uint16_t nf = 0;
    for (uint16_t k = 0; k < sent; k++)
        if (status[idx[k]] == SD_TX_SENT)
            freed[nf++] = olds[k];
    for (uint16_t k = sent; k < built; k++) {
        /* Not taken: the packet's buffer stays the caller's, the mbuf gets its own back. */
        if (status[idx[k]] == SD_TX_SENT)
            zrx_set(m[k], olds[k]);
        status[idx[k]] = SD_TX_FULL;
    }
    if (sent < built)
        rte_pktmbuf_free_bulk(m + sent, (unsigned)(built - sent));
    *nfreed = nf;
    return sent;
}
