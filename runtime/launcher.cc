#include "runtime/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string_view>

#include "ir/error.h"

extern char** environ;

namespace jfx::rt {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw JfxError({}, "launcher: " + message + ": " + std::strerror(errno));
}

// Variables the launcher owns; inherited values would contradict ours.
bool isRankVariable(std::string_view kv) {
  for (std::string_view name :
       {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
        "JFX_MASTER_LISTEN_FD=", "TORCHELASTIC_USE_AGENT_STORE=", "GROUP_RANK=", "ROLE_RANK="})
    if (kv.starts_with(name)) return true;
  return false;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "stopped (status " + std::to_string(status) + ")";
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// A TCP socket bound to addr:0 and listening; returns the fd, writes the port.
int bindFreePort(const std::string& addr, int& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket()");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  std::string host = addr == "localhost" ? "127.0.0.1" : addr;
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    ::close(fd);
    errno = EINVAL;
    fail("MASTER_ADDR " + quoteForMessage(addr) + " is not an IPv4 address");
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 1024) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail("bind/listen on " + host);
  }
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port = ntohs(sa.sin_port);
  return fd;
}

// One child's argv and environment, built before fork: between fork and exec only
// async-signal-safe calls are allowed (this process may have threads).
struct ChildArgs {
  std::vector<std::string> env_storage;
  std::vector<char*> argv, envp;
};

std::vector<ChildArgs> childArgs(const LaunchSpec& spec, std::vector<std::string>& argv_storage,
                                 int port, int listen_fd) {
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e)
    if (!isRankVariable(*e)) base_env.emplace_back(*e);
  std::vector<ChildArgs> children(static_cast<size_t>(spec.nproc));
  argv_storage.push_back(spec.exe);
  for (const auto& a : spec.args)
    argv_storage.push_back(a);
  for (int r = 0; r < spec.nproc; ++r) {
    ChildArgs& c = children[static_cast<size_t>(r)];
    c.env_storage = base_env;
    c.env_storage.push_back("RANK=" + std::to_string(r));
    c.env_storage.push_back("WORLD_SIZE=" + std::to_string(spec.nproc));
    c.env_storage.push_back("LOCAL_RANK=" + std::to_string(r));
    c.env_storage.push_back("LOCAL_WORLD_SIZE=" + std::to_string(spec.nproc));
    c.env_storage.push_back("MASTER_ADDR=" + spec.master_addr);
    c.env_storage.push_back("MASTER_PORT=" + std::to_string(port));
    if (r == 0) c.env_storage.push_back("JFX_MASTER_LISTEN_FD=" + std::to_string(listen_fd));
    for (auto& s : argv_storage)
      c.argv.push_back(s.data());
    c.argv.push_back(nullptr);
    for (auto& s : c.env_storage)
      c.envp.push_back(s.data());
    c.envp.push_back(nullptr);
  }
  return children;
}

timespec monotonicNow() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return t;
}

// The rank processes, and what the launcher knows of them. SIGCHLD, SIGINT and SIGTERM are
// taken synchronously with sigtimedwait (`watched`, blocked while the ranks run), so the launcher
// needs no signal handler and no global flag. Children restore the old mask before exec.
struct Ranks {
  const LaunchSpec& spec;
  sigset_t watched{}, old_mask{};
  std::vector<pid_t> pids;
  std::vector<bool> done;
  int alive = 0;
  bool stopping = false;
  timespec deadline{};  // when stopping: SIGKILL whoever is left after this

  explicit Ranks(const LaunchSpec& s)
      : spec(s), pids(static_cast<size_t>(s.nproc), -1), done(static_cast<size_t>(s.nproc)) {
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &watched, &old_mask);
  }
  ~Ranks() { pthread_sigmask(SIG_SETMASK, &old_mask, nullptr); }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  void killAll(int sig) {
    for (size_t r = 0; r < pids.size(); ++r)
      if (pids[r] > 0 && !done[r]) ::kill(pids[r], sig);
  }

  // In the child: never returns.
  [[noreturn]] void execChild(ChildArgs& c, int r, int listen_fd, pid_t parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(125);  // the launcher died before prctl took effect
    if (r == 0) {
      int flags = ::fcntl(listen_fd, F_GETFD);
      ::fcntl(listen_fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::execve(c.argv[0], c.argv.data(), c.envp.data());
    static constexpr char kMsg[] = "jointfx: launcher: execve failed\n";
    ssize_t ignored = ::write(2, kMsg, sizeof kMsg - 1);
    (void)ignored;
    ::_exit(127);
  }

  void forkAll(std::vector<ChildArgs>& children, int listen_fd) {
    const pid_t parent = ::getpid();
    for (int r = 0; r < spec.nproc; ++r) {
      pid_t pid = ::fork();
      if (pid < 0) {
        int e = errno;
        killAll(SIGKILL);
        for (size_t k = 0; k < static_cast<size_t>(r); ++k)
          ::waitpid(pids[k], nullptr, 0);
        ::close(listen_fd);
        errno = e;
        fail("fork()");
      }
      if (pid == 0) execChild(children[static_cast<size_t>(r)], r, listen_fd, parent);
      pids[static_cast<size_t>(r)] = pid;
      ++alive;
    }
    ::close(listen_fd);  // rank 0 holds its own copy
  }

  // Reaps whatever has exited (only our own children: the caller may have others); adds the
  // ranks that failed as (rank, status).
  void reap(std::vector<std::pair<int, int>>& failed) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --alive;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        failed.emplace_back(static_cast<int>(r), status);
    }
  }

  // SIGTERM to every rank, SIGKILL after the grace period (killOverdue).
  void startStopping() {
    if (stopping) return;
    stopping = true;
    killAll(SIGTERM);
    deadline = monotonicNow();
    auto ms = spec.grace.count();
    deadline.tv_sec += static_cast<time_t>(ms / 1000);
    deadline.tv_nsec += static_cast<long>((ms % 1000) * 1000000);
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000;
    }
  }

  void killOverdue() {
    if (!stopping) return;
    timespec t = monotonicNow();
    if (t.tv_sec > deadline.tv_sec ||
        (t.tv_sec == deadline.tv_sec && t.tv_nsec >= deadline.tv_nsec))
      killAll(SIGKILL);
  }

  // The first failure: which rank to blame, and the others that failed with it.
  void blame(std::vector<std::pair<int, int>>& failed, LaunchResult& result) {
    // The peers of a dead rank fail right after it ("connection closed by peer"), often
    // before the launcher has looked. Let them settle, then blame a rank killed by a signal
    // before one that exited with an error, and name the others too.
    timespec settle{0, 200 * 1000000};
    siginfo_t ignored{};
    while (::sigtimedwait(&watched, &ignored, &settle) == SIGCHLD) {
    }
    reap(failed);
    std::stable_sort(failed.begin(), failed.end(), [](const auto& a, const auto& b) {
      return WIFSIGNALED(a.second) && !WIFSIGNALED(b.second);
    });
    result.failed_rank = failed[0].first;
    result.exit_code = exitCodeOf(failed[0].second);
    result.message =
        "rank " + std::to_string(failed[0].first) + " " + describeStatus(failed[0].second);
    for (size_t k = 1; k < failed.size(); ++k)
      result.message += (k == 1 ? " (then rank " : ", rank ") + std::to_string(failed[k].first) +
                        " " + describeStatus(failed[k].second) +
                        (k + 1 == failed.size() ? ")" : "");
  }

  // Waits for every rank; stops them all at the first failure or at SIGINT/SIGTERM.
  LaunchResult supervise() {
    LaunchResult result;
    while (alive > 0) {
      std::vector<std::pair<int, int>> failed;
      reap(failed);
      // A rank we are stopping dies of our SIGTERM/SIGKILL: not the failure to report.
      if (!failed.empty() && result.failed_rank < 0 && !stopping) {
        blame(failed, result);
        startStopping();
      }
      if (alive == 0) break;
      killOverdue();
      timespec wait_for{0, 100 * 1000000};
      siginfo_t info{};
      int sig = ::sigtimedwait(&watched, &info, &wait_for);
      if (sig == SIGINT || sig == SIGTERM) {
        if (result.failed_rank < 0 && result.exit_code == 0) {
          result.exit_code = 128 + sig;
          result.message = std::string("interrupted by ") + strsignal(sig);
        }
        // Forward the user's signal as it is, then escalate after the grace period.
        killAll(sig);
        startStopping();
      }
    }
    return result;
  }
};

}  // namespace

std::string selfExecutable() {
  std::string buf(4096, '\0');
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) fail("readlink(/proc/self/exe)");
  buf.resize(static_cast<size_t>(n));
  return buf;
}

LaunchResult launchRanks(const LaunchSpec& spec) {
  if (spec.nproc < 1) {
    errno = EINVAL;
    fail("nproc must be at least 1");
  }
  int port = 0;
  int listen_fd = bindFreePort(spec.master_addr, port);
  std::vector<std::string> argv_storage;
  std::vector<ChildArgs> children = childArgs(spec, argv_storage, port, listen_fd);
  Ranks ranks(spec);
  ranks.forkAll(children, listen_fd);
  return ranks.supervise();
}

}  // namespace jfx::rt
