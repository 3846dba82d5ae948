/*
 * tools/delay-proxy.c - a TCP proxy that holds every chunk of bytes a fixed
 * time before passing it on, in both directions: a same-datacenter network
 * (0.5 ms each way) in front of a loopback server, for the benchmarks.
 * tools/delay-proxy builds and runs it; see there for the usage.
 *
 * Each direction of a connection has one thread: it reads a chunk with the
 * time the kernel received it (SO_TIMESTAMPNS), sleeps until that time plus
 * the delay (clock_nanosleep to an absolute time, so the delay is kept to
 * the microsecond, unlike an event loop whose timers round to the
 * millisecond) and writes it on. A message that arrives in several chunks
 * keeps one delay in all: a chunk that came in while the thread slept is
 * due by its own arrival, not by the end of that sleep. One wake-up per hop,
 * no hand-over between threads, so the proxy's own cost stays small.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* what one read takes at most: a large bulk write passes in a few chunks */
#if !defined(CHUNK_BYTES)
#define CHUNK_BYTES (256 * 1024)
#endif

typedef struct conn conn_t;

/* One direction: from -> to. */
typedef struct {
  int from, to;
  conn_t *conn;
} pipe_t;

struct conn {
  pipe_t up, down;
  pthread_mutex_t lock;
  int live; /* threads still running; the last one closes and frees */
};

static long delay_ns;

static void die(const char *what) {
  fprintf(stderr, "delay-proxy: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void add_ns(struct timespec *t, long ns) {
  t->tv_nsec += ns % 1000000000L;
  t->tv_sec += ns / 1000000000L;
  if (t->tv_nsec >= 1000000000L) {
    t->tv_nsec -= 1000000000L;
    t->tv_sec++;
  }
}

static void conn_release(conn_t *c) {
  int last;
  pthread_mutex_lock(&c->lock);
  last = --c->live == 0;
  pthread_mutex_unlock(&c->lock);
  if (!last) return;
  close(c->up.from);
  close(c->up.to);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* Reads a chunk with the time the kernel received it (SO_TIMESTAMPNS), so
 * what arrived while this thread slept on the previous chunk is not held
 * longer for it. Falls back to the time of the read. */
static ssize_t recv_stamped(int fd, char *buf, size_t len, struct timespec *at) {
  union {
    char space[CMSG_SPACE(sizeof(struct timespec))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = { buf, len };
  struct msghdr msg;
  struct cmsghdr *cm;
  ssize_t n;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.space;
  msg.msg_controllen = sizeof ctl.space;
  do n = recvmsg(fd, &msg, 0);
  while (n < 0 && errno == EINTR);
  clock_gettime(CLOCK_REALTIME, at);
  for (cm = CMSG_FIRSTHDR(&msg); n > 0 && cm; cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS)
      memcpy(at, CMSG_DATA(cm), sizeof *at);
  return n;
}

/* One direction of a connection: read, wait until the chunk is due, write. */
static void *pass(void *arg) {
  pipe_t *p = arg;
  char *buf = malloc(CHUNK_BYTES);
  int one = 1;
  if (!buf) die("malloc");
  /* the default 50 us of timer slack would be a tenth of the delay */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  setsockopt(p->from, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  for (;;) {
    struct timespec due;
    size_t off = 0;
    ssize_t n = recv_stamped(p->from, buf, CHUNK_BYTES, &due);
    if (n <= 0) {
      shutdown(p->to, SHUT_WR); /* the end of the stream (or a reset) goes on to the other side */
      break;
    }
    if (delay_ns > 0) {
      add_ns(&due, delay_ns);
      while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &due, NULL) == EINTR) {}
    }
    while (off < (size_t)n) {
      ssize_t m = send(p->to, buf + off, (size_t)n - off, MSG_NOSIGNAL);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) break;
      off += (size_t)m;
    }
    if (off < (size_t)n) { /* the other side went away: so does this one */
      shutdown(p->from, SHUT_RDWR);
      break;
    }
  }
  free(buf);
  conn_release(p->conn);
  return NULL;
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int split(const char *hostport, struct addrinfo **out, int passive) {
  char host[256];
  const char *colon = strrchr(hostport, ':');
  struct addrinfo hints;
  size_t n;
  if (!colon || (n = (size_t)(colon - hostport)) == 0 || n >= sizeof host) return -1;
  memcpy(host, hostport, n);
  host[n] = '\0';
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  return getaddrinfo(host, colon + 1, &hints, out) == 0 ? 0 : -1;
}

static void start(pthread_t *t, void *(*fn)(void *), void *arg) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  if (pthread_create(t, &attr, fn, arg) != 0) die("pthread_create");
  pthread_attr_destroy(&attr);
}

static void init_pipe(pipe_t *p, conn_t *c, int from, int to) {
  p->from = from;
  p->to = to;
  p->conn = c;
}

static void usage(void) {
  fprintf(stderr, "usage: tools/delay-proxy --to HOST:PORT [--listen HOST:PORT] [--delay-ms MS]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *listen_at = "127.0.0.1:0", *to = NULL;
  double delay_ms = 0.5;
  struct addrinfo *la, *ta;
  struct sockaddr_storage bound;
  socklen_t blen = sizeof bound;
  char port[16];
  int lfd, one = 1, i;

  for (i = 1; i < argc; i++) {
    if (i + 1 >= argc) usage();
    if (strcmp(argv[i], "--listen") == 0) listen_at = argv[++i];
    else if (strcmp(argv[i], "--to") == 0) to = argv[++i];
    else if (strcmp(argv[i], "--delay-ms") == 0) {
      char *end;
      delay_ms = strtod(argv[++i], &end);
      if (*end || delay_ms < 0 || delay_ms > 60000) usage();
    } else usage();
  }
  if (!to) usage();
  delay_ns = (long)(delay_ms * 1e6 + 0.5);
  signal(SIGPIPE, SIG_IGN);
  if (split(listen_at, &la, 1) != 0) { fprintf(stderr, "delay-proxy: bad --listen %s\n", listen_at); return 2; }
  if (split(to, &ta, 0) != 0) { fprintf(stderr, "delay-proxy: bad --to %s\n", to); return 2; }
  if ((lfd = socket(la->ai_family, SOCK_STREAM, 0)) < 0) die("socket");
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, la->ai_addr, la->ai_addrlen) != 0) die("bind");
  if (listen(lfd, 128) != 0) die("listen");
  if (getsockname(lfd, (struct sockaddr *)&bound, &blen) != 0) die("getsockname");
  if (getnameinfo((struct sockaddr *)&bound, blen, NULL, 0, port, sizeof port, NI_NUMERICSERV) != 0) die("getnameinfo");
  printf("%s\n", port);
  fflush(stdout);

  for (;;) {
    pthread_t t;
    conn_t *c;
    int cfd = accept(lfd, NULL, NULL), sfd;
    if (cfd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      die("accept");
    }
    if ((sfd = socket(ta->ai_family, SOCK_STREAM, 0)) < 0 || connect(sfd, ta->ai_addr, ta->ai_addrlen) != 0) {
      fprintf(stderr, "delay-proxy: connect %s: %s\n", to, strerror(errno));
      if (sfd >= 0) close(sfd);
      close(cfd); /* the client sees its connection closed, as with a server that is down */
      continue;
    }
    nodelay(cfd);
    nodelay(sfd);
    if (!(c = calloc(1, sizeof *c))) die("calloc");
    pthread_mutex_init(&c->lock, NULL);
    c->live = 2;
    init_pipe(&c->up, c, cfd, sfd);
    init_pipe(&c->down, c, sfd, cfd);
    start(&t, pass, &c->up);
    start(&t, pass, &c->down);
  }
}
