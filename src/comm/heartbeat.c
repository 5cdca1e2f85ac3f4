/* Heartbeat: no rank outlives a dead or stopped peer by more than seconds.
 *
 * --comm-timeout bounds one call; a rank that dies or stops between calls, or
 * whose link stalls inside MPI for minutes, needs a watch of its own, outside
 * MPI. At td_comm_init world rank 0 (the hub) listens on a TCP port, the
 * ports, host names and rank 0's addresses travel in one MPI_Allgather, and
 * every other rank connects to the hub. Then a thread per rank (never calling
 * MPI: MPI runs FUNNELED) sends a beat every second and watches its peers:
 * the hub watches every rank, every rank watches the hub.
 *
 *   - a peer whose connection closes without a goodbye died (the kernel
 *     closes the sockets of a killed process at once);
 *   - a peer silent for td_comm_heartbeat_timeout() seconds stopped
 *     (SIGSTOP, a process stuck in the OS, a cut link).
 *
 * The hub tells every rank which rank failed; each rank then prints one
 * report (the failed rank and its host, and the comm call in flight here,
 * from the trace ring) and _exits: the main thread may be blocked inside MPI,
 * in a shared-memory wait or a pipeline receive, and mpirun ends the job on
 * the first non-zero exit. A rank that ends the job on purpose (an error,
 * --comm-timeout) first says so (td_heartbeat_abort_notice), and the others
 * stay quiet: the user reads that rank's error, not one report per rank.
 *
 * Addresses: the hub listens on every interface and offers its IPv4
 * addresses, non-loopback first (hosts in other network namespaces reach it
 * over their link, ranks of its own host over any); TRIDENT_HEARTBEAT_ADDR=ip
 * offers that one address only. A connection proves itself with a per-job
 * token (time and pid of rank 0), so a stray listener at an offered address
 * is skipped.
 * TRIDENT_HEARTBEAT=0 turns the watch off. Single-process runs have none. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

#define HB_ADDRS 8
#define HB_HOST 64
#define HB_SETUP_S 20.0   /* a rank's whole search for the hub */
#define HB_QUIET_EXIT_S 30.0 /* after another rank's abort notice: its MPI_Abort should end us first */

enum { MSG_HELLO = 0x48420001, MSG_ACK, MSG_BEAT, MSG_BYE, MSG_ABORT, MSG_FAIL };
enum { WHY_CLOSED = 0, WHY_SILENT = 1 };

typedef struct {
    int32_t type, rank, why, pad;
    uint64_t token;
} hb_msg;

typedef struct { /* what each rank tells the others at start */
    char host[HB_HOST];
    uint32_t addr[HB_ADDRS]; /* network byte order; only the hub's are used */
    int32_t n_addr, port;
    uint64_t token;
} hb_card;

typedef struct {
    int fd, rank;
    int live;           /* watched: no goodbye yet */
    double last_rx_ms;  /* last message from it */
    unsigned char buf[sizeof(hb_msg)];
    size_t have;
} hb_peer;

static _Atomic double g_timeout_s = 60.0;
static hb_card *g_cards;
static int g_rank, g_size, g_on;
static uint64_t g_token;
static hb_peer *g_peers; /* hub: ranks 1..size-1; others: the hub alone */
static int g_n_peers;
static int g_wake[2] = {-1, -1}; /* stop: a byte on the pipe */
static pthread_t g_thread;
static pthread_mutex_t g_send_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_quiet;
static double g_frozen_ms, g_frozen_at; /* the last time this thread overslept: how long, and when */

void td_comm_set_heartbeat_timeout(double seconds) { g_timeout_s = seconds; }
double td_comm_heartbeat_timeout(void) { return g_timeout_s; }

/* ---- messages ------------------------------------------------------------ */

/* A message is 24 bytes: a send never splits one short of a full socket
 * buffer (a peer stopped for hours at one beat a second stays far from it). */
static int send_msg(int fd, int type, int rank, int why) {
    hb_msg m = {type, rank, why, 0, g_token};
    pthread_mutex_lock(&g_send_lock);
    ssize_t n = send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    pthread_mutex_unlock(&g_send_lock);
    return n == (ssize_t)sizeof m || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ? 0 : -1;
}

/* One whole message within ms milliseconds (setup only: blocking fd). */
static int recv_msg(int fd, hb_msg *m, int ms) {
    size_t have = 0;
    double end = td_now_ms() + ms;
    while (have < sizeof *m) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(end - td_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) return -1;
        ssize_t n = recv(fd, (char *)m + have, sizeof *m - have, 0);
        if (n <= 0) return -1;
        have += (size_t)n;
    }
    return m->token == g_token ? 0 : -1;
}

/* ---- setup (main thread) --------------------------------------------------- */

static void local_addrs(hb_card *c) {
    const char *fixed = getenv("TRIDENT_HEARTBEAT_ADDR");
    if (fixed && *fixed) {
        struct in_addr a;
        TD_CHECK(inet_pton(AF_INET, fixed, &a) == 1,
                 "TRIDENT_HEARTBEAT_ADDR=%s is not an IPv4 address (the address of world rank "
                 "0's host that every rank reaches, e.g. 10.0.0.1)", fixed);
        c->addr[c->n_addr++] = a.s_addr;
        return;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) ifs = NULL;
    for (int loop = 0; loop < 2; loop++) /* non-loopback first */
        for (struct ifaddrs *i = ifs; i && c->n_addr < HB_ADDRS; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
            if (!!(i->ifa_flags & IFF_LOOPBACK) != loop) continue;
            c->addr[c->n_addr++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        }
    if (ifs) freeifaddrs(ifs);
    if (c->n_addr == 0) c->addr[c->n_addr++] = htonl(INADDR_LOOPBACK);
}

static int listen_any(const hb_card *c, int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    /* an address given by the user is the only one offered, so bind it */
    a.sin_addr.s_addr = getenv("TRIDENT_HEARTBEAT_ADDR") && *getenv("TRIDENT_HEARTBEAT_ADDR")
                            ? c->addr[0] : htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A connection to the hub at one of its addresses that answers our hello
 * with the job's token; -1 when none does within the setup time. */
static int connect_hub(const hb_card *hub, char *why, size_t why_n) {
    double end = td_now_ms() + HB_SETUP_S * 1000.0;
    snprintf(why, why_n, "no address tried");
    while (td_now_ms() < end) {
        for (int i = 0; i < hub->n_addr; i++) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) continue;
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)hub->port)};
            a.sin_addr.s_addr = hub->addr[i];
            char ip[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
            int rc = connect(fd, (struct sockaddr *)&a, sizeof a), err = rc == 0 ? 0 : errno;
            if (err == EINPROGRESS) {
                struct pollfd p = {fd, POLLOUT, 0};
                socklen_t el = sizeof err;
                if (poll(&p, 1, 2000) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                else err = ETIMEDOUT;
            }
            hb_msg ack;
            if (err == 0) {
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
                if (send_msg(fd, MSG_HELLO, g_rank, 0) == 0 && recv_msg(fd, &ack, 3000) == 0 &&
                    ack.type == MSG_ACK)
                    return fd;
                snprintf(why, why_n, "%s:%d accepted but did not answer as this job's rank 0", ip,
                         hub->port);
            } else {
                snprintf(why, why_n, "%s:%d: %s", ip, hub->port, strerror(err));
            }
            close(fd);
        }
        usleep(200 * 1000); /* the hub may still be starting to accept */
    }
    return -1;
}

/* Hub: every other rank's hello, within the setup time. */
static int accept_all(int lfd, char *why, size_t why_n) {
    double end = td_now_ms() + (HB_SETUP_S + 5.0) * 1000.0;
    int got = 0;
    while (got < g_size - 1) {
        struct pollfd p = {lfd, POLLIN, 0};
        int left = (int)(end - td_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        hb_msg m;
        int r = recv_msg(fd, &m, 3000) == 0 && m.type == MSG_HELLO ? m.rank : -1;
        if (r < 1 || r >= g_size || g_peers[r - 1].fd >= 0 || send_msg(fd, MSG_ACK, 0, 0) != 0) {
            close(fd); /* not one of ours, or a second hello */
            continue;
        }
        g_peers[r - 1].fd = fd;
        got++;
    }
    if (got == g_size - 1) return 0;
    for (int i = 0; i < g_n_peers; i++)
        if (g_peers[i].fd < 0) {
            snprintf(why, why_n, "it heard from %d of %d ranks within %.0f s (rank %d, host %s, "
                     "never connected)", got, g_size - 1, HB_SETUP_S + 5.0, g_peers[i].rank,
                     g_cards[g_peers[i].rank].host);
            break;
        }
    return -1;
}

static void *heartbeat_main(void *arg);
static void report(int rank, int why);

void td_heartbeat_start(MPI_Comm world) {
    TD_MPI(MPI_Comm_rank(world, &g_rank));
    TD_MPI(MPI_Comm_size(world, &g_size));
    const char *env = getenv("TRIDENT_HEARTBEAT");
    if (g_size < 2 || (env && !strcmp(env, "0"))) return;
    hb_card me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    int lfd = -1, ok = 1;
    char why[256] = "";
    if (g_rank == 0) {
        local_addrs(&me);
        lfd = listen_any(&me, &me.port);
        if (lfd < 0) {
            char ip[INET_ADDRSTRLEN] = "0.0.0.0";
            const char *fixed = getenv("TRIDENT_HEARTBEAT_ADDR");
            if (fixed && *fixed) inet_ntop(AF_INET, &me.addr[0], ip, sizeof ip);
            snprintf(why, sizeof why, "it could not listen on %s: %s", ip, strerror(errno));
            ok = 0;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        me.token = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
    }
    g_cards = calloc((size_t)g_size, sizeof *g_cards);
    TD_ASSERT(g_cards);
    TD_MPI(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, g_cards, (int)sizeof me, MPI_BYTE, world));
    g_token = g_cards[0].token;
    g_n_peers = g_rank == 0 ? g_size - 1 : 1;
    g_peers = calloc((size_t)g_n_peers, sizeof *g_peers);
    TD_ASSERT(g_peers);
    for (int i = 0; i < g_n_peers; i++) g_peers[i] = (hb_peer){.fd = -1, .rank = g_rank == 0 ? i + 1 : 0};
    if (g_rank == 0 && ok) {
        ok = accept_all(lfd, why, sizeof why) == 0;
    } else if (g_rank != 0 && g_cards[0].port > 0) {
        g_peers[0].fd = connect_hub(&g_cards[0], why, sizeof why);
        ok = g_peers[0].fd >= 0;
    }
    if (lfd >= 0) close(lfd);
    /* all ranks agree before anyone relies on the watch */
    int first_bad = ok ? g_size : g_rank;
    TD_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, world));
    if (first_bad < g_size) {
        if (first_bad == g_rank)
            td_fail("heartbeat: rank %d could not join the failure watch (%s); set "
                    "TRIDENT_HEARTBEAT_ADDR to an IPv4 address of rank 0's host that every rank "
                    "reaches, or TRIDENT_HEARTBEAT=0 to run unwatched", g_rank, why);
        TD_MPI(MPI_Barrier(world)); /* that rank's abort ends us */
    }
    for (int i = 0; i < g_n_peers; i++) {
        fcntl(g_peers[i].fd, F_SETFL, fcntl(g_peers[i].fd, F_GETFL) | O_NONBLOCK);
        int one = 1;
        setsockopt(g_peers[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        g_peers[i].live = 1;
        g_peers[i].last_rx_ms = td_now_ms();
    }
    TD_ASSERT(pipe2(g_wake, O_CLOEXEC) == 0);
    /* every signal stays with the main thread (SIGTERM / SIGUSR1 handlers) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g_thread, NULL, heartbeat_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    TD_CHECK(rc == 0, "heartbeat: could not start its thread (%s)", strerror(rc));
    g_on = 1;
}

/* Normal end: goodbyes, so nobody takes the closing sockets for a death. */
void td_heartbeat_stop(void) {
    if (!g_on) return;
    for (int i = 0; i < g_n_peers; i++)
        if (g_peers[i].fd >= 0) send_msg(g_peers[i].fd, MSG_BYE, g_rank, 0);
    ssize_t w = write(g_wake[1], "x", 1);
    (void)w;
    pthread_join(g_thread, NULL);
    for (int i = 0; i < g_n_peers; i++)
        if (g_peers[i].fd >= 0) close(g_peers[i].fd);
    close(g_wake[0]);
    close(g_wake[1]);
    free(g_peers);
    free(g_cards);
    g_peers = NULL, g_cards = NULL, g_on = 0;
}

void td_heartbeat_abort_notice(void) {
    if (!g_on) return;
    atomic_store(&g_quiet, 1); /* our own report, if any, is already out */
    for (int i = 0; i < g_n_peers; i++)
        if (g_peers[i].fd >= 0 && g_peers[i].live) send_msg(g_peers[i].fd, MSG_ABORT, g_rank, 0);
}

/* ---- the watch (heartbeat thread: no MPI from here on) ------------------- */

/* Peer i failed: the hub first tells every other rank, then this rank reports
 * and exits. After an abort notice nothing is reported: that rank's own error
 * is the one to read, and its abort is ending the job. */
static void peer_lost(int i, int why) {
    hb_peer *p = &g_peers[i];
    p->live = 0;
    if (atomic_load(&g_quiet)) return;
    if (g_rank == 0)
        for (int j = 0; j < g_n_peers; j++)
            if (j != i && g_peers[j].live) send_msg(g_peers[j].fd, MSG_FAIL, p->rank, why);
    report(p->rank, why);
}

static void report(int rank, int why) {
    char what[512];
    const char *host = g_cards ? g_cards[rank].host : "?";
    if (why == WHY_CLOSED)
        snprintf(what, sizeof what,
                 "rank %d (host %s) is gone: its heartbeat connection closed without a goodbye "
                 "(the process died or was killed)", rank, host);
    else
        snprintf(what, sizeof what,
                 "rank %d (host %s) stopped responding: no heartbeat for %g s (--heartbeat-timeout; "
                 "stopped, stuck, or its link is cut)", rank, host, (double)g_timeout_s);
    /* a rank that was itself stopped sees its peers give up on it, when it runs again */
    size_t n = strlen(what);
    if (g_frozen_ms > 0 && td_now_ms() - g_frozen_at < 5000.0)
        snprintf(what + n, sizeof what - n, "; this rank itself did not run for %.1f s before (stopped?)",
                 g_frozen_ms / 1000.0);
    td_trace_peer_lost(what);
}

static void on_msg(int i, const hb_msg *m) {
    hb_peer *p = &g_peers[i];
    p->last_rx_ms = td_now_ms();
    switch (m->type) {
    case MSG_BYE:
        p->live = 0; /* finished: its socket closes next */
        break;
    case MSG_ABORT: /* m->rank ends the job with its own error */
        if (g_rank == 0)
            for (int j = 0; j < g_n_peers; j++)
                if (j != i && g_peers[j].live) send_msg(g_peers[j].fd, MSG_ABORT, m->rank, 0);
        atomic_store(&g_quiet, 1);
        break;
    case MSG_FAIL: /* from the hub: another rank failed */
        if (g_rank != 0 && !atomic_load(&g_quiet) && m->rank > 0 && m->rank < g_size)
            report(m->rank, m->why == WHY_SILENT ? WHY_SILENT : WHY_CLOSED);
        break;
    default: /* MSG_BEAT */
        break;
    }
}

static void read_peer(int i) {
    hb_peer *p = &g_peers[i];
    while (p->live) {
        ssize_t n = recv(p->fd, p->buf + p->have, sizeof p->buf - p->have, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) { /* end of stream or reset without a goodbye */
            peer_lost(i, WHY_CLOSED);
            return;
        }
        p->have += (size_t)n;
        if (p->have < sizeof p->buf) continue;
        hb_msg m;
        memcpy(&m, p->buf, sizeof m);
        p->have = 0;
        if (m.token == g_token) on_msg(i, &m);
    }
}

static void *heartbeat_main(void *arg) {
    (void)arg;
    struct pollfd *pf = calloc((size_t)g_n_peers + 1, sizeof *pf);
    int *who = calloc((size_t)g_n_peers + 1, sizeof *who);
    TD_ASSERT(pf && who);
    double next_beat = 0, quiet_since = -1;
    for (;;) {
        double now = td_now_ms(), timeout_ms = g_timeout_s * 1000.0;
        /* a beat a second; four per timeout when the timeout is short */
        double interval = timeout_ms > 0 && timeout_ms / 4 < 1000 ? timeout_ms / 4 : 1000;
        if (interval < 50) interval = 50;
        if (now >= next_beat) {
            for (int i = 0; i < g_n_peers; i++)
                if (g_peers[i].live && send_msg(g_peers[i].fd, MSG_BEAT, g_rank, 0) != 0)
                    peer_lost(i, WHY_CLOSED);
            next_beat = now + interval;
        }
        int n = 0;
        pf[n++] = (struct pollfd){g_wake[0], POLLIN, 0};
        for (int i = 0; i < g_n_peers; i++)
            if (g_peers[i].live) who[n] = i, pf[n++] = (struct pollfd){g_peers[i].fd, POLLIN, 0};
        int wait = (int)(next_beat - now) + 1;
        poll(pf, (nfds_t)n, wait < 1 ? 1 : wait);
        double woke = td_now_ms();
        if (woke - now > wait + (interval > 1000 ? interval : 1000)) {
            /* overslept: this process did not run (SIGSTOP then SIGCONT, or
             * starved); the peers' silence is ours, their timeout restarts */
            g_frozen_ms = woke - now, g_frozen_at = woke;
            for (int i = 0; i < g_n_peers; i++) g_peers[i].last_rx_ms = woke;
        }
        if (pf[0].revents) break; /* td_heartbeat_stop */
        for (int k = 1; k < n; k++)
            if (pf[k].revents) read_peer(who[k]);
        now = td_now_ms();
        if (atomic_load(&g_quiet)) {
            /* another rank's abort (or ours) should end this process; if
             * nothing has after a while, end it here */
            if (quiet_since < 0) quiet_since = now;
            if (now - quiet_since > HB_QUIET_EXIT_S * 1000.0) {
                fprintf(stderr, "trident: rank %d: the job was ending with an error on another "
                        "rank, but this rank was not stopped; exiting\n", g_rank);
                _exit(1);
            }
            continue;
        }
        for (int i = 0; i < g_n_peers; i++)
            if (g_peers[i].live && timeout_ms > 0 && now - g_peers[i].last_rx_ms > timeout_ms)
                peer_lost(i, WHY_SILENT);
    }
    free(pf);
    free(who);
    return NULL;
}
