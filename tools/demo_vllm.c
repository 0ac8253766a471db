/*
 * demo_vllm.c - moeft demo --engine vllm: moeft's main job on a real vLLM.
 *
 * One server: `moeft run --gateway` (this moeft) starts vLLM's OpenAI
 * server under the preload with moeft's KV connector (python/, module
 * moeft.vllm).  N clients stream greedy completions through the gateway,
 * twice with the same requests:
 *   1. uninterrupted: each client's text is its reference;
 *   2. once the leading client has KILL_AT of its tokens, SIGKILL to the
 *      server's process group; moeft run restores the server from its
 *      logs and starts it again, the gateway sends each request on, and
 *      the clients' streams go on.
 * The report: whether every client got its reference text, with status
 * 200 and no error; how long the streams paused; and from the gateway's
 * lines how much of what it sent again the restarted server had cached
 * (moeft's restored KV), against a plain restart that computes it all
 * again.  Then SIGTERM to moeft run, which stops the server and the
 * gateway and must leave none of the server's processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <curl/curl.h>
#include <jansson.h>

#include "child.h"
#include "cli.h"
#include "demo.h"
#include "http.h"
#include "json.h"
#include "launch.h"
#include "procs.h"

#define DEFAULT_CLIENTS 8
#define DEFAULT_TOKENS 256
#define KILL_AT 0.4		/* of --tokens, in the leading client's stream */
#define DEFAULT_WAIT_S 600.0	/* for the server to start, or to come back */
#define STOP_WAIT_S 60.0	/* moeft run's --grace (30 s) and its own stop */
#define POLL_MS 100
#define LOG_MAX (8u << 20)	/* of moeft run's messages, read for the report */
#define SHOWN_LINES 12		/* of them, when something failed */
#define MAX_RESTORE_LINES 4
#define SERVER_MODULE "vllm.entrypoints.openai.api_server"
#define KV_CONFIG "{\"kv_connector\":\"MoeftConnector\"," \
	"\"kv_connector_module_path\":\"moeft.vllm\",\"kv_role\":\"kv_both\"}"

struct vdemo {
	const struct cli_command *cmd;
	int json;
	const char *python, *model, *lib;
	unsigned clients, tokens;
	double wait_s;
	char **extra;			/* the server's arguments after "--" */
	int nextra;
	char preload[PATH_MAX], self[PATH_MAX], py[PATH_MAX];
	char dir[64];			/* temporary: the logs, moeft run's messages */
	char wal[PATH_MAX], log[PATH_MAX];
	char url[64];			/* the gateway's: http://127.0.0.1:PORT */
	pid_t run;			/* moeft run; 0 once reaped */
	int run_status;
	int keep;
};

/* One streaming client of a pass. */
struct client {
	CURL *easy;
	char *body;
	struct http_buf in;	/* its bytes not yet a whole event */
	struct http_buf text;
	long status;
	unsigned tokens;	/* token ids streamed */
	double last, gap;	/* its last event; the longest wait for one */
	char error[256];	/* why it failed: a transfer error, an error event */
};

struct pass {
	struct client *c;
	double seconds;
	pid_t killed;		/* the server's pid when it was killed, else 0 */
	unsigned kill_client, kill_tokens;
};

/* What moeft run's messages say (its restore's, the gateway's). */
struct run_said {
	unsigned restored;		/* times it restored the server */
	unsigned went_on;		/* requests the gateway sent on */
	long long sent, cached;		/* their prompt tokens, and cached */
	int not_reported;		/* a line without cached_tokens */
	double first_token_s;		/* the slowest first token after health */
	char restore[MAX_RESTORE_LINES][256];
	unsigned nrestore;
};

/* ---- options ----------------------------------------------------------------- */

/* The options into d: 0, or -1 with the exit status in *code. */
static int parse(struct vdemo *d, int argc, char **argv, int *code)
{
	static const struct option opts[] = {
		{ "engine", required_argument, NULL, 'e' },
		{ "python", required_argument, NULL, 'P' },
		{ "model", required_argument, NULL, 'm' },
		{ "clients", required_argument, NULL, 'c' },
		{ "tokens", required_argument, NULL, 't' },
		{ "wait", required_argument, NULL, 'W' },
		{ "preload", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = d->cmd };
	char msg[PATH_MAX + 128];
	uint64_t v;
	int c;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'e':
			if (strcmp(optarg, "vllm"))
				cli_usage_error(&o, "--engine %s: one engine at a time", optarg);
			break;
		case 'P': d->python = optarg; break;
		case 'm': d->model = optarg; break;
		case 'c':
			if (cli_parse_u64(&o, "--clients", optarg, 1, 64, &v) == 0)
				d->clients = (unsigned)v;
			break;
		case 't':
			if (cli_parse_u64(&o, "--tokens", optarg, 16, 4096, &v) == 0)
				d->tokens = (unsigned)v;
			break;
		case 'W': cli_parse_double(&o, "--wait", optarg, 10, 86400, &d->wait_s); break;
		case 'p': d->lib = optarg; break;
		case 'j': o.json = 1; break;
		case 'h':
			cli_print_usage(d->cmd, stdout);
			*code = EXIT_OK;
			return -1;
		}
	}
	d->json = o.json;
	if (optind > 0 && !strcmp(argv[optind - 1], "--")) {
		d->extra = &argv[optind];
		d->nextra = argc - optind;
	} else if (optind < argc) {
		cli_usage_error(&o, "unexpected argument '%s' (the server's own arguments go "
				"after \"--\")", argv[optind]);
	}
	if (!d->model)
		cli_usage_error(&o, "--engine vllm needs --model MODEL: an MoE model vLLM serves "
				"(tools/demo.sh --engine vllm makes a tiny one)");
	else if (!*d->model)
		cli_usage_error(&o, "--model: empty");
	if (child_find(d->python, d->py, sizeof d->py) < 0)
		cli_usage_error(&o, "--python %s: %s", d->python,
				errno == ENOENT && !strchr(d->python, '/') ? "not found in PATH" :
				strerror(errno));
	if (!d->lib) {
		if (launch_find_preload(d->preload, sizeof d->preload) < 0)
			cli_usage_error(&o, "--preload LIB is required: no %s",
					d->preload[0] ? d->preload : "libmoeft.so beside moeft");
		d->lib = d->preload;
	}
	if (launch_check_lib(d->lib, msg, sizeof msg) < 0)
		cli_usage_error(&o, "--preload %s", msg);
	if (readlink("/proc/self/exe", d->self, sizeof d->self - 1) <= 0)
		cli_usage_error(&o, "/proc/self/exe: %s", strerror(errno));
	*code = cli_parse_done(&o);
	return *code ? -1 : 0;
}

/* ---- moeft run and its server -------------------------------------------------- */

/* The last lines of a child's messages (the file path) to stderr. */
static void show_tail(const char *path)
{
	char line[1024], ring[SHOWN_LINES][1024];
	unsigned n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(line, sizeof line, f))
		snprintf(ring[n++ % SHOWN_LINES], sizeof ring[0], "%s", line);
	fclose(f);
	for (unsigned i = n > SHOWN_LINES ? n - SHOWN_LINES : 0; i < n; i++)
		fputs(ring[i % SHOWN_LINES], stderr);
}

/* Fail: the message, then moeft run's last lines; the directory is kept. */
static int fail_with_log(struct vdemo *d, int code, const char *what)
{
	cli_fail(d->cmd, d->json, 0, "%s; the last lines of moeft run (all in %s):", what,
		 d->log);
	show_tail(d->log);
	d->keep = 1;
	return code;
}

/* Whether moeft run is still there (reaping it when it is not). */
static int run_alive(struct vdemo *d)
{
	if (d->run && waitpid(d->run, &d->run_status, WNOHANG) == d->run)
		d->run = 0;
	return d->run != 0;
}

/* A TCP port of 127.0.0.1 that nothing listens on now; 0 when none. */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	unsigned port = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Whether d->python has vLLM's OpenAI server and moeft's connector: 0,
 * or EXIT_USAGE once said why not. */
static int check_python(struct vdemo *d)
{
	char *argv[] = { d->py, "-c", "import " SERVER_MODULE ", moeft.vllm", NULL };
	char path[PATH_MAX + 16], how[64];
	static const char *const none[] = { NULL };
	char **env = child_env(none);
	int fd, status = -1, e = ENOMEM;
	pid_t pid;

	snprintf(path, sizeof path, "%s/python.err", d->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (env && fd >= 0 && !(e = child_spawn(&pid, argv, env, fd, fd)))
		status = child_wait(pid);
	child_env_free(env);
	if (fd >= 0)
		close(fd);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	cli_fail(d->cmd, d->json, 0, "--python %s cannot import %s and moeft.vllm (%s); install "
		 "them (tools/setup.sh --vllm makes such a Python)%s", d->py, SERVER_MODULE,
		 e ? strerror(e) : child_how(how, sizeof how, status), e ? "" : "; it said:");
	show_tail(path);
	return EXIT_USAGE;
}

/* Start moeft run --gateway with the server; its messages into d->log. */
static int start_run(struct vdemo *d)
{
	/* the server's messages in the order it wrote them */
	static const char *const add[] = { "PYTHONUNBUFFERED=1", NULL };
	char gateway[32], port[16], **env = child_env(add), **argv;
	char *head[] = { d->self, "run", "--wal", d->wal, "--gateway", gateway, "--preload",
			 (char *)d->lib, "--", d->py, "-m", SERVER_MODULE, "--model",
			 (char *)d->model, "--port", port, "--seed", "0",
			 /* usage's cached_tokens: what the gateway's lines report */
			 "--enable-prompt-tokens-details", "--kv-transfer-config", KV_CONFIG };
	size_t nhead = sizeof head / sizeof head[0];
	unsigned gport = free_port(), sport = free_port();
	int fd, e = ENOMEM;

	if (!gport || !sport || gport == sport)
		return cli_fail(d->cmd, d->json, EXIT_USAGE, "no free TCP port on 127.0.0.1");
	snprintf(gateway, sizeof gateway, "127.0.0.1:%u", gport);
	snprintf(port, sizeof port, "%u", sport);
	snprintf(d->url, sizeof d->url, "http://127.0.0.1:%u", gport);
	snprintf(d->wal, sizeof d->wal, "%s/wal", d->dir);
	snprintf(d->log, sizeof d->log, "%s/run.log", d->dir);
	argv = calloc(nhead + (size_t)d->nextra + 1, sizeof *argv);
	fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (argv && env && fd >= 0) {
		memcpy(argv, head, sizeof head);
		memcpy(argv + nhead, d->extra, (size_t)d->nextra * sizeof *argv);
		e = child_spawn(&d->run, argv, env, fd, fd);
	} else if (fd < 0) {
		e = errno;
	}
	if (fd >= 0)
		close(fd);
	free(argv);
	child_env_free(env);
	if (e)
		return cli_fail(d->cmd, d->json, EXIT_USAGE, "cannot start moeft run: %s",
				strerror(e));
	return 0;
}

/* Until the server answers /health through the gateway: 0, or a status
 * once said why not. */
static int wait_up(struct vdemo *d, double *seconds)
{
	double t0 = cli_now();
	char url[96], err[256], what[128], how[64];
	struct http_buf r;
	long st;

	http_url(url, sizeof url, d->url, "/health");
	while (!demo_interrupted) {
		if (!run_alive(d)) {
			snprintf(what, sizeof what, "moeft run %s before the server answered",
				 child_how(how, sizeof how, d->run_status));
			return fail_with_log(d, EXIT_USAGE, what);
		}
		st = http_request(url, NULL, NULL, 5, &r, err, sizeof err);
		free(r.p);
		if (st == 200) {
			*seconds = cli_now() - t0;
			return 0;
		}
		if (cli_now() - t0 > d->wait_s) {
			snprintf(what, sizeof what, "the server did not answer /health within %.0f s",
				 d->wait_s);
			return fail_with_log(d, EXIT_USAGE, what);
		}
		usleep(POLL_MS * 1000);
	}
	return EXIT_USAGE;
}

/* Whether process pid is moeft's gateway (argv[1] "gateway"). */
static int is_gateway(pid_t pid)
{
	char path[64], args[64] = "";
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, args, sizeof args - 1);
	close(fd);
	if (n <= 0)
		return 0;
	args[n] = '\0';
	return !strcmp(args + strlen(args) + 1, "gateway");
}

struct finding {
	pid_t parent, found;
};

/* A child of moeft run that leads its process group and is not the
 * gateway: the server, or its restore about to become it. */
static int server_match(const struct proc_info *p, void *arg)
{
	struct finding *f = arg;

	if (p->ppid != f->parent || p->pgrp != p->pid || p->state == 'Z' || is_gateway(p->pid))
		return 0;
	f->found = p->pid;
	return 1;
}

static pid_t server_of(pid_t run)
{
	struct finding f = { .parent = run };

	procs_each(server_match, &f);
	return f.found;
}

/* Processes of process group pgrp still there (zombies included). */
static int group_count(const struct proc_info *p, void *arg)
{
	pid_t *pg = arg;

	if (p->pgrp == pg[0])
		pg[1]++;
	return 0;
}

static unsigned left_in_group(pid_t pgrp)
{
	pid_t pg[2] = { pgrp, 0 };

	procs_each(group_count, pg);
	return (unsigned)pg[1];
}

/* ---- the clients ------------------------------------------------------------- */

/* Client i's prompt: 40 + 10 i words "w<n>" (the vocabulary of the tiny
 * test model python/tests/make_tiny_moe.py makes; any tokenizer takes
 * them), its own from the first on: no prefix in common. */
static char *prompt_of(unsigned i)
{
	struct http_buf b = { 0 };
	char word[16];
	int bad = 0;

	for (unsigned j = 0; j < 40 + 10 * i && !bad; j++) {
		int n = snprintf(word, sizeof word, "%sw%u", j ? " " : "",
				 (97 * i + 13 * j * (i + 1) + 7) % 1200);

		bad = http_buf_add(&b, word, (size_t)n);
	}
	if (bad) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* An event's data, to the client it came to. */
static void on_data(void *arg, const char *data)
{
	struct client *c = arg;
	json_t *ev, *choice, *ids, *err;
	double now = cli_now();

	if (!strcmp(data, "[DONE]") || !(ev = json_loads(data, 0, NULL)))
		return;
	if ((err = json_object_get(ev, "error"))) {
		json_t *m = json_object_get(err, "message");

		snprintf(c->error, sizeof c->error, "an error event: %.200s",
			 json_is_string(m) ? json_string_value(m) : data);
	}
	choice = json_array_get(json_object_get(ev, "choices"), 0);
	ids = json_object_get(choice, "token_ids");
	if (json_is_array(ids) && json_array_size(ids)) {
		json_t *text = json_object_get(choice, "text");

		if (json_is_string(text))
			http_buf_add(&c->text, json_string_value(text), json_string_length(text));
		c->tokens += (unsigned)json_array_size(ids);
		if (c->last > 0 && now - c->last > c->gap)
			c->gap = now - c->last;
		c->last = now;
	}
	json_decref(ev);
}

static size_t from_gateway(char *p, size_t size, size_t n, void *arg)
{
	struct client *c = arg;
	size_t len = size * n;

	if (!c->status)
		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
	if (http_buf_add(&c->in, p, len) < 0 || c->in.len > HTTP_REPLY_MAX)
		return 0;
	if (c->status == 200)
		http_sse_take(&c->in, on_data, c);
	return len;
}

static void clients_free(struct client *c, unsigned n)
{
	for (unsigned i = 0; c && i < n; i++) {
		if (c[i].easy)
			curl_easy_cleanup(c[i].easy);
		free(c[i].body);
		free(c[i].in.p);
		free(c[i].text.p);
	}
	free(c);
}

/* The clients' requests, ready to send; NULL when out of memory. */
static struct client *clients_new(const struct vdemo *d, struct curl_slist *headers)
{
	struct client *c = calloc(d->clients, sizeof *c);
	char url[96];

	http_url(url, sizeof url, d->url, "/v1/completions");
	for (unsigned i = 0; c && i < d->clients; i++) {
		char *prompt = prompt_of(i);
		/* token ids: the tokens counted, not pieces of text */
		json_t *req = prompt ? json_pack("{s:s, s:s, s:i, s:f, s:b, s:b, s:b}", "model",
						 d->model, "prompt", prompt, "max_tokens",
						 (int)d->tokens, "temperature", 0.0, "stream", 1,
						 "ignore_eos", 1, "return_token_ids", 1) : NULL;

		c[i].body = req ? json_dumps(req, JSON_COMPACT) : NULL;
		c[i].easy = curl_easy_init();
		json_decref(req);
		free(prompt);
		if (!c[i].body || !c[i].easy) {
			clients_free(c, d->clients);
			return NULL;
		}
		curl_easy_setopt(c[i].easy, CURLOPT_URL, url);
		curl_easy_setopt(c[i].easy, CURLOPT_POSTFIELDS, c[i].body);
		curl_easy_setopt(c[i].easy, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(c[i].easy, CURLOPT_WRITEFUNCTION, from_gateway);
		curl_easy_setopt(c[i].easy, CURLOPT_WRITEDATA, &c[i]);
		curl_easy_setopt(c[i].easy, CURLOPT_PRIVATE, &c[i]);
		curl_easy_setopt(c[i].easy, CURLOPT_NOSIGNAL, 1L);
	}
	return c;
}

/* The leading client and its tokens. */
static unsigned leader(const struct client *c, unsigned n)
{
	unsigned best = 0;

	for (unsigned i = 1; i < n; i++)
		if (c[i].tokens > c[best].tokens)
			best = i;
	return best;
}

/* In the crash pass: SIGKILL to the server's process group once the
 * leading client has KILL_AT of its tokens. */
static void maybe_kill(struct vdemo *d, struct pass *p)
{
	unsigned lead = leader(p->c, d->clients);
	pid_t server;

	if (p->killed || p->c[lead].tokens < (unsigned)(d->tokens * KILL_AT) ||
	    !(server = server_of(d->run)))
		return;
	kill(-server, SIGKILL);
	p->killed = server;
	p->kill_client = lead;
	p->kill_tokens = p->c[lead].tokens;
}

/* A transfer's end, as its client saw it. */
static void transfer_done(CURLMsg *m)
{
	struct client *c;

	curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
	if (m->data.result != CURLE_OK && !c->error[0])
		snprintf(c->error, sizeof c->error, "%s", curl_easy_strerror(m->data.result));
	else if (c->status != 200 && !c->error[0])
		snprintf(c->error, sizeof c->error, "HTTP %ld: %.200s", c->status,
			 c->in.p ? c->in.p : "");
}

/* Every client's stream to its end, all at once; with crash, the server
 * killed mid-way.  0, or a status once said why the pass failed. */
static int stream(struct vdemo *d, struct pass *p, int crash)
{
	struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
	CURLM *multi = curl_multi_init();
	double t0 = cli_now();
	int running = 1, ret = 0, left;
	char what[128], how[64];
	CURLMsg *m;

	p->c = headers && multi ? clients_new(d, headers) : NULL;
	if (!p->c) {
		ret = cli_fail(d->cmd, d->json, EXIT_USAGE, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < d->clients; i++)
		curl_multi_add_handle(multi, p->c[i].easy);
	while (running && !demo_interrupted) {
		curl_multi_perform(multi, &running);
		while ((m = curl_multi_info_read(multi, &left)))
			if (m->msg == CURLMSG_DONE)
				transfer_done(m);
		if (crash)
			maybe_kill(d, p);
		if (!run_alive(d)) {
			snprintf(what, sizeof what, "moeft run %s while its clients streamed",
				 child_how(how, sizeof how, d->run_status));
			ret = fail_with_log(d, EXIT_BAD, what);
			break;
		}
		if (cli_now() - t0 > d->wait_s + d->tokens) {	/* a token a second at worst */
			ret = fail_with_log(d, EXIT_BAD, "the clients did not finish in time");
			break;
		}
		if (running)
			curl_multi_poll(multi, NULL, 0, POLL_MS, NULL);
	}
	p->seconds = cli_now() - t0;
	for (unsigned i = 0; i < d->clients; i++) {	/* their connections closed */
		curl_multi_remove_handle(multi, p->c[i].easy);
		curl_easy_cleanup(p->c[i].easy);
		p->c[i].easy = NULL;
	}
out:
	curl_multi_cleanup(multi);
	curl_slist_free_all(headers);
	return demo_interrupted ? EXIT_USAGE : ret;
}

/* ---- the report -------------------------------------------------------------- */

/* One of moeft run's message lines into what it says. */
static void run_line(struct run_said *s, const char *line)
{
	const char *p, *q;
	long long sent, cached;
	double first;

	if (strstr(line, "moeft run: ") == line && strstr(line, "; restoring it from "))
		s->restored++;
	if (strstr(line, "moeft restore: window ") == line && s->nrestore < MAX_RESTORE_LINES) {
		const char *end = strstr(line, " -> ");

		snprintf(s->restore[s->nrestore++], sizeof s->restore[0], "%.*s",
			 (int)((end ? end : line + strlen(line)) - line - 15), line + 15);
	}
	/* tools/gateway.c, say_resumed() */
	if (strstr(line, "moeft gateway: request ") != line ||
	    !(p = strstr(line, " went on after ")) || !(q = strstr(p, ": ")) ||
	    sscanf(q, ": %lld prompt tokens sent again, ", &sent) != 1)
		return;
	s->went_on++;
	s->sent += sent;
	if (strstr(q, " sent again, (not reported) "))
		s->not_reported = 1;
	else if ((q = strstr(q, " sent again, ")) && sscanf(q, " sent again, %lld", &cached) == 1)
		s->cached += cached;
	if ((q = strstr(p, "; its first token ")) && sscanf(q, "; its first token %lf", &first) == 1 &&
	    first > s->first_token_s)
		s->first_token_s = first;
}

static void read_run_log(const struct vdemo *d, struct run_said *s)
{
	char line[2048];
	size_t seen = 0;
	FILE *f = fopen(d->log, "r");

	while (f && fgets(line, sizeof line, f) && (seen += strlen(line)) < LOG_MAX)
		run_line(s, line);
	if (f)
		fclose(f);
}

struct verdict {
	unsigned equal, ok;	/* clients with the reference text; with 200, no error */
	double pause;		/* the longest wait for a token in the crash pass */
	unsigned tokens;	/* the reference pass's, all clients */
};

static void judge(const struct vdemo *d, const struct pass *ref, const struct pass *crash,
		  struct verdict *v)
{
	for (unsigned i = 0; i < d->clients; i++) {
		const struct client *a = &ref->c[i], *b = &crash->c[i];

		v->tokens += a->tokens;
		v->ok += b->status == 200 && !b->error[0];
		v->equal += a->text.len == b->text.len && a->text.len &&
			    !memcmp(a->text.p, b->text.p, a->text.len);
		if (b->gap > v->pause)
			v->pause = b->gap;
	}
}

/* The reference pass failed a client: the demo cannot compare. */
static int reference_failed(struct vdemo *d, const struct pass *ref)
{
	char what[400];

	for (unsigned i = 0; i < d->clients; i++) {
		if (ref->c[i].status == 200 && !ref->c[i].error[0] && ref->c[i].tokens)
			continue;
		snprintf(what, sizeof what, "in the uninterrupted pass, client %u failed: %s", i + 1,
			 ref->c[i].error[0] ? ref->c[i].error : "no tokens");
		return fail_with_log(d, EXIT_USAGE, what);
	}
	return 0;
}

static void print_text(const struct vdemo *d, double up_s, const struct pass *ref,
		       const struct pass *crash, const struct run_said *s,
		       const struct verdict *v, unsigned left)
{
	long long computed = s->sent - s->cached;

	printf("  server up under moeft run:           %.1f s\n", up_s);
	printf("  uninterrupted pass:                  %u tokens in %.1f s\n", v->tokens,
	       ref->seconds);
	printf("  crash pass: SIGKILL to the server's process group when client %u had %u "
	       "tokens\n", crash->kill_client + 1, crash->kill_tokens);
	for (unsigned i = 0; i < s->nrestore; i++)
		printf("  moeft restore: %s\n", s->restore[i]);
	printf("  moeft run restored the server and started it again (%u time%s)\n", s->restored,
	       s->restored == 1 ? "" : "s");
	printf("  the gateway sent %u request%s on: %lld prompt tokens sent again, %lld of "
	       "them cached;\n  the slowest of them had its first token %.3f s after the server's "
	       "health\n\n",
	       s->went_on, s->went_on == 1 ? "" : "s", s->sent, s->cached, s->first_token_s);
	if (v->equal == d->clients && v->ok == d->clients)
		printf("RESULT: every client's text equals the uninterrupted pass's (%u of %u), "
		       "status 200, no error\n", v->equal, d->clients);
	else
		printf("RESULT: %u of %u clients got the uninterrupted pass's text, %u of %u "
		       "status 200 with no error (kept in %s)\n", v->equal, d->clients, v->ok,
		       d->clients, d->dir);
	printf("PAUSE: the longest wait for a token was %.1f s (the restart); no client saw "
	       "the crash otherwise\n", v->pause);
	printf("RECOMPUTE: the restarted server computed %lld of the %lld tokens sent again%s;\n"
	       "     without moeft the clients' streams would have broken, and sent again by\n"
	       "     hand to a plain restart, every one of the %lld tokens is computed again\n",
	       computed, s->sent, s->not_reported ? " (some lines did not say)" : "", s->sent);
	printf("STOP: SIGTERM to moeft run: it %s; %u of the server's processes left\n",
	       d->run ? "did not end" : "ended", left);
}

static void print_json(const struct vdemo *d, double up_s, const struct pass *ref,
		       const struct pass *crash, const struct run_said *s,
		       const struct verdict *v, unsigned left)
{
	struct json j;

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "ok");
	json_kv_str(&j, "result", v->equal == d->clients && v->ok == d->clients ?
		    "equal" : "differ");
	json_kv_str(&j, "engine", "vllm");
	json_kv_str(&j, "model", d->model);
	json_kv_u64(&j, "clients", d->clients);
	json_kv_u64(&j, "clients_equal", v->equal);
	json_kv_u64(&j, "clients_ok", v->ok);
	json_kv_u64(&j, "max_tokens", d->tokens);
	json_kv_double(&j, "server_up_s", up_s);
	json_kv_u64(&j, "reference_tokens", v->tokens);
	json_kv_double(&j, "reference_s", ref->seconds);
	json_kv_u64(&j, "kill_client", crash->kill_client + 1);
	json_kv_u64(&j, "kill_tokens", crash->kill_tokens);
	json_kv_double(&j, "pause_s", v->pause);
	json_kv_u64(&j, "restores", s->restored);
	json_kv_u64(&j, "requests_sent_on", s->went_on);
	json_kv_i64(&j, "prompt_tokens_sent_again", s->sent);
	json_kv_i64(&j, "cached_tokens", s->cached);
	json_kv_double(&j, "first_token_after_health_s", s->first_token_s);
	json_kv_bool(&j, "run_ended", !d->run);
	json_kv_u64(&j, "server_processes_left", left);
	json_kv_str(&j, "kept_dir", d->keep ? d->dir : NULL);
	json_obj_end(&j);
}

/* ---- the command --------------------------------------------------------------- */

/* SIGTERM to moeft run, and wait for it (SIGKILL after STOP_WAIT_S). */
static void stop_run(struct vdemo *d)
{
	double t0 = cli_now();

	if (!d->run)
		return;
	kill(d->run, SIGTERM);
	while (run_alive(d) && cli_now() - t0 < STOP_WAIT_S)
		usleep(POLL_MS * 1000);
	if (d->run) {
		kill(d->run, SIGKILL);
		child_wait(d->run);
	}
}

static int demo_passes(struct vdemo *d)
{
	struct pass ref = { 0 }, crash = { 0 };
	struct run_said said = { 0 };
	struct verdict v = { 0 };
	unsigned left = 0;
	pid_t server = 0;
	double up_s = 0;
	int ret;

	if (!d->json) {
		printf("moeft demo: vLLM (%s -m %s) serving %s under moeft run --gateway,\n"
		       "  %u streaming clients through the gateway, %u tokens each, greedy\n",
		       d->py, SERVER_MODULE, d->model, d->clients, d->tokens);
		fflush(stdout);
	}
	if ((ret = check_python(d)) || (ret = start_run(d)) || (ret = wait_up(d, &up_s)) ||
	    (ret = stream(d, &ref, 0)) || (ret = reference_failed(d, &ref)) ||
	    (ret = stream(d, &crash, 1)))
		goto out;
	if (!crash.killed) {
		ret = fail_with_log(d, EXIT_USAGE, "the crash pass ended before its kill (more "
				    "--tokens?)");
		goto out;
	}
	server = server_of(d->run);
	stop_run(d);
	if (server)
		left = left_in_group(server);
	read_run_log(d, &said);
	judge(d, &ref, &crash, &v);
	ret = v.equal == d->clients && v.ok == d->clients && !d->run && !left &&
	      said.restored ? EXIT_OK : EXIT_BAD;
	d->keep |= ret != EXIT_OK;
	if (d->json)
		print_json(d, up_s, &ref, &crash, &said, &v, left);
	else
		print_text(d, up_s, &ref, &crash, &said, &v, left);
out:
	stop_run(d);
	clients_free(ref.c, d->clients);
	clients_free(crash.c, d->clients);
	return ret;
}

int demo_vllm(const struct cli_command *cmd, int argc, char **argv)
{
	struct vdemo *d = calloc(1, sizeof *d);
	int ret;

	if (!d)
		return cli_fail(cmd, 0, EXIT_USAGE, "out of memory");
	*d = (struct vdemo){ .cmd = cmd, .python = "python3", .clients = DEFAULT_CLIENTS,
			     .tokens = DEFAULT_TOKENS, .wait_s = DEFAULT_WAIT_S };
	if (parse(d, argc, argv, &ret) < 0) {
		free(d);
		return ret;
	}
	demo_catch_interrupts();
	snprintf(d->dir, sizeof d->dir, "/dev/shm/moeft-demo.XXXXXX");
	if (!mkdtemp(d->dir)) {
		ret = cli_fail(cmd, d->json, EXIT_USAGE, "cannot make a directory in /dev/shm: %s",
			       strerror(errno));
		free(d);
		return ret;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		ret = cli_fail(cmd, d->json, EXIT_USAGE, "libcurl: cannot start");
	else
		ret = demo_passes(d);
	curl_global_cleanup();
	if (!d->keep || demo_interrupted)
		cli_rm_tree(d->dir);
	free(d);
	demo_end_if_interrupted();
	return ret;
}
