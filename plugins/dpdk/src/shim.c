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
#include <stddef.h>
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

/* ---- zero copy: Sluice's buffers are the mbufs ----------------------------------------
 *
 * Every Sluice buffer i has an mbuf header of its own, slot i of an array kept here (the
 * mempool's 24-byte object header, then the 128-byte struct rte_mbuf, 256 bytes), whose buf_addr is
 * RTE_PKTMBUF_HEADROOM bytes in front of the buffer's data area (inside Sluice's larger
 * headroom): a device writes a packet where Sluice expects it and reads one where Sluice put
 * it. These mbufs form the mempool `sluice_zc`, whose operations ("sluice") are Sluice's
 * buffer pool: a dequeue allocates Sluice buffers (callback), an enqueue frees them. So
 * receive hands the mbuf's buffer to the graph as it is (the mbuf is not freed: it goes with
 * its buffer), transmit fills the packet's own mbuf header and bursts it, and DPDK frees a
 * sent mbuf into the mempool's per-lcore cache, from where the next receive takes it again:
 * in the steady state no buffer passes through Sluice's pool at all, and nothing is copied
 * or swapped (VPP's dpdk plugin works the same way). Mbufs of other pools, chained,
 * indirect or shared mbufs are copied. */

typedef unsigned (*sd_buf_alloc_fn)(uint32_t *idx, unsigned n);
typedef void (*sd_buf_free_fn)(const uint32_t *idx, unsigned n);
typedef unsigned (*sd_buf_avail_fn)(void);

/* Bytes per slot: the object header in front of the mbuf, the mbuf (no private area), padded
 * to a power of two (an mbuf's buffer index is a shift away). */
#define ZSLOT 256
#define ZHDR 64
_Static_assert(sizeof(struct rte_mbuf) == 128, "mbuf size");
_Static_assert(sizeof(struct rte_mempool_objhdr) <= ZHDR, "mempool object header size");
/* sd_tx writes data_off, refcnt, nb_segs and port as one little-endian 64-bit word. */
_Static_assert(offsetof(struct rte_mbuf, refcnt) == offsetof(struct rte_mbuf, data_off) + 2 &&
                   offsetof(struct rte_mbuf, nb_segs) == offsetof(struct rte_mbuf, data_off) + 4 &&
                   offsetof(struct rte_mbuf, port) == offsetof(struct rte_mbuf, data_off) + 6,
               "mbuf rearm layout");

static struct {
    uint8_t *base;     /* buffer i's headroom starts at base + i * stride */
    uint64_t stride;
    uint16_t headroom; /* Sluice's headroom in front of the data area */
    uint16_t data_size;
    uint8_t *slots;    /* n slots of ZSLOT bytes */
    uint32_t n;
    struct rte_mempool *mp; /* NULL: no zero copy */
    sd_buf_alloc_fn alloc;
    sd_buf_free_fn free;
    sd_buf_avail_fn avail;
} zc;

/* Buffers that went DPDK's way (dequeued, transmitted) and Sluice's way (enqueued,
 * received): their difference (summed) is what DPDK holds. Counted per lcore, each on a
 * cache line of its own (written on every receive and transmit: shared counters would
 * bounce between threads, and beside zc's fields they would evict what every packet reads);
 * threads that are no lcore share the last slot, hence the atomic adds. */
struct zcount {
    uint64_t to_dpdk, to_sluice;
} __attribute__((aligned(RTE_CACHE_LINE_SIZE)));
static struct zcount zcnt[RTE_MAX_LCORE + 1];

static inline struct zcount *zcount_here(void)
{
    unsigned l = rte_lcore_id();
    return &zcnt[l < RTE_MAX_LCORE ? l : RTE_MAX_LCORE];
}

static inline struct rte_mbuf *zmbuf(uint32_t i)
{
    return (struct rte_mbuf *)(zc.slots + (uint64_t)i * ZSLOT + ZHDR);
}

static inline uint32_t zidx(const void *m)
{
    return (uint32_t)(((uintptr_t)m - (uintptr_t)zc.slots) / ZSLOT);
}

/* Where Sluice buffer i's data area starts. */
static inline uint8_t *zdata(uint32_t i)
{
    return zc.base + (uint64_t)i * zc.stride + zc.headroom;
}

static int zops_alloc(struct rte_mempool *mp)
{
    (void)mp;
    return 0;
}

static void zops_free(struct rte_mempool *mp)
{
    (void)mp;
}

#define ZCHUNK 64

static int zops_enqueue(struct rte_mempool *mp, void *const *obj, unsigned n)
{
    uint32_t idx[ZCHUNK];
    (void)mp;
    for (unsigned a = 0; a < n;) {
        unsigned k = n - a < ZCHUNK ? n - a : ZCHUNK;
        for (unsigned i = 0; i < k; i++)
            idx[i] = zidx(obj[a + i]);
        zc.free(idx, k);
        a += k;
    }
    __atomic_fetch_add(&zcount_here()->to_sluice, n, __ATOMIC_RELAXED);
    return 0;
}

/* All or nothing, as a mempool dequeue must be. The mbufs come out as DPDK expects a free
 * one: one segment, no next, reference count 1. */
static int zops_dequeue(struct rte_mempool *mp, void **obj, unsigned n)
{
    uint32_t idx[ZCHUNK];
    unsigned a = 0;
    while (a < n) {
        unsigned k = n - a < ZCHUNK ? n - a : ZCHUNK;
        unsigned got = zc.alloc(idx, k);
        for (unsigned i = 0; i < got; i++) {
            struct rte_mbuf *m = zmbuf(idx[i]);
            m->next = NULL;
            m->nb_segs = 1;
            rte_mbuf_refcnt_set(m, 1);
            obj[a + i] = m;
        }
        __atomic_fetch_add(&zcount_here()->to_dpdk, got, __ATOMIC_RELAXED);
        a += got;
        if (got < k) {
            if (a)
                zops_enqueue(mp, obj, a);
            return -ENOBUFS;
        }
    }
    return 0;
}

static unsigned zops_count(const struct rte_mempool *mp)
{
    (void)mp;
    return zc.avail();
}

static struct rte_mempool_ops zops = {
    .name = "sluice",
    .alloc = zops_alloc,
    .free = zops_free,
    .enqueue = zops_enqueue,
    .dequeue = zops_dequeue,
    .get_count = zops_count,
};

/* Where Sluice's buffers are: buffer i's headroom (`headroom` bytes) starts at
 * base + i * stride, its data area (`data_size` bytes) follows. Set once, before any receive
 * or transmit (copies use it too). */
void sd_arena(uint8_t *base, uint64_t stride, uint16_t headroom, uint16_t data_size)
{
    zc.base = base;
    zc.stride = stride;
    zc.headroom = headroom;
    zc.data_size = data_size;
}

/* Makes Sluice's `n` buffers (sd_arena) the mbufs of the mempool `sluice_zc`, returned in
 * `*out`; `alloc`/`free`/`avail` are Sluice's pool. Once, after EAL init. Returns 0 or a
 * negative errno (-ENOSPC: DPDK's table of mempool drivers is full). */
int sd_zc_init(uint32_t n, unsigned cache, sd_buf_alloc_fn alloc, sd_buf_free_fn free_fn,
               sd_buf_avail_fn avail, struct rte_mempool **out)
{
    uint16_t headroom = zc.headroom, data_size = zc.data_size;
    if (zc.mp)
        return -EEXIST;
    if (!zc.base || (uint32_t)data_size + RTE_PKTMBUF_HEADROOM > UINT16_MAX ||
        headroom < RTE_PKTMBUF_HEADROOM)
        return -EINVAL;
    int r = rte_mempool_register_ops(&zops);
    if (r < 0)
        return r;
    uint8_t *slots = NULL;
    if (posix_memalign((void **)&slots, RTE_CACHE_LINE_SIZE, (size_t)n * ZSLOT) != 0)
        return -ENOMEM;
    memset(slots, 0, (size_t)n * ZSLOT);
    struct rte_mempool *mp =
        rte_mempool_create_empty("sluice_zc", n, sizeof(struct rte_mbuf), cache,
                                 sizeof(struct rte_pktmbuf_pool_private), SOCKET_ID_ANY, 0);
    if (!mp) {
        free(slots);
        return -(rte_errno ? rte_errno : ENOMEM);
    }
    if ((r = rte_mempool_set_ops_byname(mp, "sluice", NULL)) != 0) {
        rte_mempool_free(mp);
        free(slots);
        return r;
    }
    struct rte_pktmbuf_pool_private *priv = rte_mempool_get_priv(mp);
    priv->mbuf_data_room_size = (uint16_t)(data_size + RTE_PKTMBUF_HEADROOM);
    priv->mbuf_priv_size = 0;
    priv->flags = 0;
    zc.slots = slots;
    zc.n = n;
    zc.alloc = alloc;
    zc.free = free_fn;
    zc.avail = avail;
    for (uint32_t i = 0; i < n; i++) {
        struct rte_mbuf *m = zmbuf(i);
        struct rte_mempool_objhdr *h = (struct rte_mempool_objhdr *)((uint8_t *)m - sizeof(*h));
        uint8_t *buf = zdata(i) - RTE_PKTMBUF_HEADROOM;
        h->mp = mp;
        h->iova = (rte_iova_t)(uintptr_t)m;
        STAILQ_INSERT_TAIL(&mp->elt_list, h, next);
        mp->populated_size++;
        m->priv_size = 0;
        m->buf_addr = buf;
        rte_mbuf_iova_set(m, (rte_iova_t)(uintptr_t)buf);
        m->buf_len = (uint16_t)(data_size + RTE_PKTMBUF_HEADROOM);
        m->pool = mp;
        m->nb_segs = 1;
        m->port = RTE_MBUF_PORT_INVALID;
        rte_mbuf_refcnt_set(m, 1);
        m->next = NULL;
        rte_pktmbuf_reset_headroom(m);
    }
    /* Devices may use these addresses (virtual devices only: see the plugin). */
    mp->flags &= ~RTE_MEMPOOL_F_NON_IO;
    __atomic_store_n(&zc.mp, mp, __ATOMIC_RELEASE);
    *out = mp;
    return 0;
}

/* Sluice buffers DPDK holds now: in the mempool's per-lcore caches, in devices' rings and
 * queues. */
uint64_t sd_zc_lent(void)
{
    uint64_t d = 0, s = 0;
    for (unsigned i = 0; i <= RTE_MAX_LCORE; i++) {
        d += __atomic_load_n(&zcnt[i].to_dpdk, __ATOMIC_RELAXED);
        s += __atomic_load_n(&zcnt[i].to_sluice, __ATOMIC_RELAXED);
    }
    return d > s ? d - s : 0;
}

/* ---- mbuf pools ---------------------------------------------------------------------- */

/* A plain pool of `n` mbufs (copying receive and transmit). */
struct rte_mempool *sd_pool_create(const char *name, unsigned n, unsigned cache, int socket)
{
    return rte_pktmbuf_pool_create(name, n, cache, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
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

/* Whether packet m's segments lie within their buffers and add up to its length: what a
 * device claims (data_off, data_len, pkt_len, nb_segs) is checked before anything reads the
 * packet (net_null,size=4000 claims 4000 bytes in a 2048-byte buffer). */
static int mbuf_sane(const struct rte_mbuf *m)
{
    uint32_t sum = 0;
    uint16_t segs = 0;
    for (const struct rte_mbuf *s = m; s; s = s->next) {
        if ((uint32_t)s->data_off + s->data_len > s->buf_len || segs == m->nb_segs)
            return 0;
        segs++;
        sum += s->data_len;
    }
    return segs == m->nb_segs && sum == m->pkt_len;
}

/* Receives up to `n` packets into m[] (bursts of SD_BURST while the queue fills them). For
 * packet i, idx[i] is the Sluice buffer holding it (zero copy: the mbuf goes with it and is
 * not freed), its first byte `off[i]` bytes after the buffer's data area (negative: in the
 * headroom), `len[i]` bytes long; or idx[i] is UINT32_MAX (not a single-segment, direct,
 * unshared mbuf of `sluice_zc` whose data lies in its buffer): the caller copies it
 * (sd_rx_copy) and frees the mbuf, `len[i]` being the whole packet's length, or UINT32_MAX
 * when the packet's segments do not lie in their buffers or do not add up to its length
 * (mbuf_sane): the caller drops it (counted) without reading it. `*ncopy` says how many are
 * not zero copy. */
uint16_t sd_rx(uint16_t port, uint16_t q, struct rte_mbuf **m, uint16_t n, uint32_t *idx,
               int16_t *off, uint32_t *len, uint16_t *ncopy)
{
    uint16_t got = 0, nc = 0;
    while (got < n) {
        uint16_t want = (uint16_t)(n - got) < SD_BURST ? (uint16_t)(n - got) : SD_BURST;
        uint16_t k = rte_eth_rx_burst(port, q, m + got, want);
        got = (uint16_t)(got + k);
        if (k < want)
            break;
    }
    const struct rte_mempool *mp = zc.mp;
    /* A zero-copy mbuf's buffer: what sd_zc_init gave every one (its buf_len, not re-read). */
    const uint32_t room = (uint32_t)zc.data_size + RTE_PKTMBUF_HEADROOM;
    for (uint16_t i = 0; i < got; i++) {
        const struct rte_mbuf *s = m[i];
        uint64_t w; /* data_off, refcnt, nb_segs, port */
        memcpy(&w, &s->data_off, sizeof(w));
        len[i] = s->pkt_len;
        /* Direct (no indirect or external buffer), refcnt 1, one segment, and its data in
         * its buffer: what the device says is not trusted further than the buffer. */
        if (likely(s->pool == mp && (uint32_t)(w >> 16) == 0x00010001u &&
                   RTE_MBUF_DIRECT(s) && s->data_len == s->pkt_len &&
                   (uint32_t)(uint16_t)w + s->data_len <= room)) {
            idx[i] = zidx(s);
            off[i] = (int16_t)((uint16_t)w - RTE_PKTMBUF_HEADROOM);
            continue;
        }
        idx[i] = UINT32_MAX;
        if (!mbuf_sane(s))
            len[i] = UINT32_MAX;
        nc++;
    }
    if (got > nc)
        __atomic_fetch_add(&zcount_here()->to_sluice, (uint64_t)(got - nc), __ATOMIC_RELAXED);
    *ncopy = nc;
    return got;
}

/* Copies the first `cap` bytes of packets m[0..n) into the data areas of Sluice buffers
 * buf[0..n). */
void sd_rx_copy(struct rte_mbuf *const *m, uint16_t n, const uint32_t *buf, uint32_t cap)
{
    for (uint16_t i = 0; i < n; i++) {
        const struct rte_mbuf *s = m[i];
        uint8_t *dst = zdata(buf[i]);
        uint32_t o = 0;
        while (s && o < cap) {
            /* Bounded by the buffer as well (sd_rx has checked, this is belt and braces). */
            uint32_t k = s->data_off < s->buf_len ? s->data_len : 0;
            if (k > (uint32_t)(s->buf_len - s->data_off))
                k = (uint32_t)(s->buf_len - s->data_off);
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

/* Frees mbufs (the copied ones of a receive). */
void sd_free_bulk(struct rte_mbuf **m, uint16_t n)
{
    rte_pktmbuf_free_bulk(m, n);
}

#define SD_MAX_TX 256

/* Status of each packet handed to sd_tx. */
enum { SD_TX_SENT = 0, SD_TX_NO_MBUF = 1, SD_TX_FULL = 2, SD_TX_COPIED = 3 };

/* Builds the mbuf of one packet by copying segments [first, end) (Sluice buffers idx, data
 * at off, len bytes): `head` comes raw from `mp`. Returns 0, or -1 when its chain could not
 * be allocated (`head` is then freed). */
static int tx_copy(struct rte_mempool *mp, struct rte_mbuf *head, uint16_t room,
                   const uint32_t *seg_idx, const int16_t *seg_off, const uint16_t *seg_len,
                   uint16_t first, uint16_t end)
{
    struct rte_mbuf *cur = head;
    uint32_t total = 0;
    rte_pktmbuf_reset(head);
    for (uint16_t j = first; j < end; j++) {
        const uint8_t *src = zdata(seg_idx[j]) + seg_off[j];
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

/* Transmits `npkts` packets on queue `q`. Packet i is `nseg[i]` (NULL: all 1) consecutive entries of
 * `seg_idx`/`seg_off`/`seg_len` (a Sluice buffer chain: buffer indices, packet start relative
 * to the data area, lengths). With `zc_ok` (and sluice_zc set up) a packet goes out in its
 * own buffers' mbufs, unless a segment starts more than RTE_PKTMBUF_HEADROOM bytes into the
 * headroom; anything else is copied into mbufs of `mp` (an mbuf chain when longer than one).
 * `status[i]` says what happened to packet i: SENT (its buffers are DPDK's now), COPIED (sent,
 * the buffers are still the caller's), NO_MBUF or FULL (not sent, still the caller's). Returns
 * the number sent; `*nother` is how many packets are not SENT. */
uint16_t sd_tx(uint16_t port, uint16_t q, struct rte_mempool *mp, const uint32_t *seg_idx,
               const int16_t *seg_off, const uint16_t *seg_len, const uint16_t *nseg,
               uint16_t npkts, int zc_ok, uint8_t *status, uint16_t *nother)
{
    struct rte_mbuf *m[SD_MAX_TX];
    uint16_t pkt[SD_MAX_TX]; /* which packet each built mbuf carries */
    uint16_t built = 0, s = 0, other = 0;
    uint32_t nzseg = 0;
    if (npkts > SD_MAX_TX)
        npkts = SD_MAX_TX;
    int zon = zc_ok && zc.mp;
    if (zon && nseg == NULL) {
        /* Single buffers, the common case: each goes out in its own mbuf header, which
         * already says what a free mbuf says (no next segment: see sd_zc_init), unless one
         * starts too deep in the headroom (then the general path below). */
        int bad = 0;
        /* data_off, refcnt 1, nb_segs 1, port: one store. */
        const uint64_t rearm = ((uint64_t)1 << 16) | ((uint64_t)1 << 32) | ((uint64_t)port << 48);
        for (uint16_t i = 0; i < npkts; i++) {
            struct rte_mbuf *x = zmbuf(seg_idx[i]);
            int32_t o = seg_off[i] + RTE_PKTMBUF_HEADROOM;
            uint64_t r = rearm | (uint16_t)o;
            bad |= o;
            memcpy(&x->data_off, &r, sizeof(r));
            x->ol_flags = 0;
            x->packet_type = 0;
            x->pkt_len = seg_len[i];
            x->data_len = seg_len[i];
            m[i] = x;
        }
        /* A negative data_off (the sign bit of some `o`): redo all on the general path. */
        if (likely(bad >= 0)) {
            uint16_t sent = rte_eth_tx_burst(port, q, m, npkts);
            if (sent)
                __atomic_fetch_add(&zcount_here()->to_dpdk, sent, __ATOMIC_RELAXED);
            if (unlikely(sent < npkts)) {
                memset(status, SD_TX_SENT, sent);
                memset(status + sent, SD_TX_FULL, (size_t)(npkts - sent));
            }
            *nother = (uint16_t)(npkts - sent);
            return sent;
        }
    }
    uint16_t room = (uint16_t)(rte_pktmbuf_data_room_size(mp) - RTE_PKTMBUF_HEADROOM);
    for (uint16_t i = 0; i < npkts; i++) {
        uint16_t first = s, ns = nseg ? nseg[i] : 1;
        s = (uint16_t)(s + ns);
        struct rte_mbuf *head = NULL;
        if (zon) {
            int ok = 1;
            for (uint16_t j = first; j < s; j++)
                ok &= seg_off[j] >= -RTE_PKTMBUF_HEADROOM;
            if (likely(ok)) {
                struct rte_mbuf *prev = NULL;
                uint32_t total = 0;
                for (uint16_t j = first; j < s; j++) {
                    struct rte_mbuf *x = zmbuf(seg_idx[j]);
                    x->data_off = (uint16_t)(seg_off[j] + RTE_PKTMBUF_HEADROOM);
                    x->data_len = seg_len[j];
                    x->nb_segs = 1;
                    x->port = port;
                    x->ol_flags = 0;
                    x->packet_type = 0;
                    x->next = NULL;
                    rte_mbuf_refcnt_set(x, 1);
                    total += seg_len[j];
                    if (prev)
                        prev->next = x;
                    else
                        head = x;
                    prev = x;
                }
                head->nb_segs = ns;
                head->pkt_len = total;
                nzseg += ns;
                status[i] = SD_TX_SENT;
            }
        }
        if (!head) {
            head = rte_mbuf_raw_alloc(mp);
            if (!head || tx_copy(mp, head, room, seg_idx, seg_off, seg_len, first, s) != 0) {
                status[i] = SD_TX_NO_MBUF;
                other++;
                continue;
            }
            head->port = port;
            status[i] = SD_TX_COPIED;
            other++;
        }
        m[built] = head;
        pkt[built] = i;
        built++;
    }
    uint16_t sent = built ? rte_eth_tx_burst(port, q, m, built) : 0;
    if (unlikely(sent < built)) {
        for (uint16_t k = sent; k < built; k++) {
            /* Not taken: a zero-copy packet's buffers stay the caller's (their mbuf headers
             * mean nothing until the next transmit), a copy is freed. */
            if (status[pkt[k]] == SD_TX_SENT) {
                /* Unlinked again: a buffer's mbuf header has no next segment while the
                 * buffer is Sluice's (sd_tx's single-buffer path relies on it). */
                nzseg -= m[k]->nb_segs;
                for (struct rte_mbuf *x = m[k], *nx; x; x = nx) {
                    nx = x->next;
                    x->next = NULL;
                    x->nb_segs = 1;
                }
                other++;
            } else {
                rte_pktmbuf_free(m[k]);
            }
            status[pkt[k]] = SD_TX_FULL;
        }
    }
    if (nzseg)
        __atomic_fetch_add(&zcount_here()->to_dpdk, nzseg, __ATOMIC_RELAXED);
    *nother = other;
    return sent;
}
