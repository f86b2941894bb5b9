/* The floor of a recv/send HTTP/1.1 server, for comparing loadterm's unpipelined cost against:
 * one thread, edge-triggered epoll, and per readable connection one recv() and, for each
 * complete request head it holds, one canned response of a 1 KiB body sent with one send().
 * No parsing beyond finding "\r\n\r\n", no timers, no statistics: what is left of a request's
 * cost is the system calls and the kernel's TCP work.
 *
 *   gcc -O2 -o /tmp/epoll-floor bench/epoll-floor.c
 *   taskset -c 0 /tmp/epoll-floor 18888 &
 *   taskset -c 1 h2load --h1 -n 100000 -c 50 -t 1 -m 1 http://127.0.0.1:18888/?s=1k
 *
 * bench/cpu-per-request.sh and bench/peer-compare.sh take it as a server command
 * ('/tmp/epoll-floor {clear_port}'). Only /?s=1k-shaped rows make sense: every answer is 1 KiB.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static char response[2048];
static size_t response_len;

static void answer(int fd) {
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN)) {
      close(fd);
      return;
    }
    if (n < 0) return;
    /* One response per request head in what was read (pipelined requests included). */
    for (char *p = buf; (p = memmem(p, buf + n - p, "\r\n\r\n", 4)) != NULL; p += 4)
      if (send(fd, response, response_len, MSG_NOSIGNAL) < 0) {
        close(fd);
        return;
      }
    if ((size_t)n < sizeof buf) return; /* drained: edge-triggered epoll reports the next */
  }
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 18888;
  response_len = (size_t)snprintf(response, sizeof response,
                                  "HTTP/1.1 200 OK\r\ncontent-length: 1024\r\n"
                                  "content-type: application/octet-stream\r\n\r\n");
  memset(response + response_len, 'x', 1024);
  response_len += 1024;

  int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1024)) {
    perror("bind/listen");
    return 1;
  }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = l}, evs[256];
  epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd != l) {
        answer(fd);
        continue;
      }
      int c;
      while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event cev = {.events = EPOLLIN | EPOLLET, .data.fd = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
      }
    }
  }
}
