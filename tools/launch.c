/*
 * launch.c - the programs moeft starts (launch.h): where its companions
 * are, and starting the command moeft restore brings back.
 *
 * That command replaces moeft (exec), so it keeps the process id a
 * supervisor started, its signals and its exit status.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "launch.h"
#include "moeft.h"

/* See launch.h: build_rel is relative to BUILD, installed absolute,
 * beside[] relative to the directory of this moeft. */
static int find(char *out, size_t len, const char *build_rel, const char *installed,
		const char *const beside[])
{
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	int w;

	out[0] = '\0';
	if (n <= 0)
		return -1;
	exe[n] = '\0';
	if (!(slash = strrchr(exe, '/')))
		return -1;
	*slash = '\0';			/* DIR/moeft -> DIR */
	if ((slash = strrchr(exe, '/'))) {	/* BUILD/tools -> BUILD: a build tree? */
		*slash = '\0';
		w = snprintf(out, len, "%s/build.ninja", exe);
		if (w > 0 && (size_t)w < len && access(out, F_OK) == 0) {
			w = snprintf(out, len, "%s/%s", exe, build_rel);
			return w > 0 && (size_t)w < len && access(out, F_OK) == 0 ? 0 : -1;
		}
		*slash = '/';
	}
	/* Installed: where meson put it, else beside a moved installation. */
	w = snprintf(out, len, "%s", installed);
	if (w > 0 && (size_t)w < len && access(out, F_OK) == 0)
		return 0;
	for (size_t i = 0; beside[i]; i++) {
		w = snprintf(out, len, "%s/%s", exe, beside[i]);
		if (w > 0 && (size_t)w < len && access(out, F_OK) == 0)
			return 0;
	}
	snprintf(out, len, "%s", installed);
	return -1;
}

int launch_find_preload(char *out, size_t len)
{
	static const char *const beside[] = {
		"../lib/libmoeft.so", "../lib/x86_64-linux-gnu/libmoeft.so",
		"../lib/aarch64-linux-gnu/libmoeft.so", "../lib64/libmoeft.so", NULL
	};

	return find(out, len, "preload/libmoeft.so", MOEFT_INSTALLED_PRELOAD, beside);
}

int launch_find_serve(char *out, size_t len)
{
	static const char *const beside[] = { "../libexec/moeft/moeft-serve", NULL };

	return find(out, len, "demo/moeft-serve", MOEFT_INSTALLED_SERVE, beside);
}

/* The ELF header of path into *h: 0, or -1 with errno (EINVAL: not ELF). */
static int elf_header(const char *path, ElfW(Ehdr) *h)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, h, sizeof *h);
	close(fd);
	if (n < 0)
		return -1;
	if (n != sizeof *h || memcmp(h->e_ident, ELFMAG, SELFMAG)) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* Whether the ELF file path (header h) is a program built as PIE: an
 * ET_DYN that ld.so refuses to load as a library.  Read errors say no. */
static int pie(const char *path, const ElfW(Ehdr) *h)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
	ElfW(Phdr) ph;
	ElfW(Dyn) dyn;

	for (unsigned i = 0; fd >= 0 && i < h->e_phnum && !found; i++) {
		off_t at = (off_t)(h->e_phoff + (ElfW(Off))i * h->e_phentsize);

		if (pread(fd, &ph, sizeof ph, at) != sizeof ph || ph.p_type != PT_DYNAMIC)
			continue;
		for (ElfW(Off) o = 0; o + sizeof dyn <= ph.p_filesz; o += sizeof dyn) {
			if (pread(fd, &dyn, sizeof dyn, (off_t)(ph.p_offset + o)) != sizeof dyn ||
			    dyn.d_tag == DT_NULL)
				break;
			if (dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_PIE))
				found = 1;
		}
	}
	if (fd >= 0)
		close(fd);
	return found;
}

int launch_check_lib(const char *path, char *msg, size_t len)
{
	ElfW(Ehdr) lib, self;

	if (elf_header(path, &lib) < 0) {
		snprintf(msg, len, "%s: %s", path, errno == EINVAL ? "not an ELF file" :
			 strerror(errno));
		return -1;
	}
	if (lib.e_type != ET_DYN || pie(path, &lib)) {
		snprintf(msg, len, "%s: not a shared library", path);
		return -1;
	}
	if (elf_header("/proc/self/exe", &self) == 0 &&
	    (lib.e_ident[EI_CLASS] != self.e_ident[EI_CLASS] || lib.e_machine != self.e_machine)) {
		snprintf(msg, len, "%s: a library for another machine", path);
		return -1;
	}
	return 0;
}

/* In a child: 0 when lib loads and answers as a preload of this API
 * version; else 1 (no load), 2 (no moeft API), 3 (another version). */
static int moeft_api(const char *lib)
{
	int (*version)(void);
	void *h, *p;

	/* Its restore mode must not start in the check. */
	unsetenv("MOEFT_RESTORE");
	if (!(h = dlopen(lib, RTLD_NOW | RTLD_LOCAL)))
		return 1;
	if (!(p = dlsym(h, "moeft_api_version")))
		return 2;
	memcpy(&version, &p, sizeof p);
	return version() == MOEFT_API_VERSION ? 0 : 3;
}

int launch_check_preload(const char *path, char *msg, size_t len)
{
	static const char *const why[] = {
		[1] = "the dynamic loader cannot load it",
		[2] = "it exports no moeft API (moeft_api_version)",
		[3] = "its moeft API is of another version than this moeft's",
	};
	char inner[PATH_MAX + 64];
	int status = -1;
	pid_t pid;

	/* LD_PRELOAD splits its list at these: such a path would never load. */
	if (strpbrk(path, ": \t")) {
		snprintf(msg, len, "%s: not a moeft preload library: LD_PRELOAD cannot name a "
			 "path holding ':' or a blank", path);
		return -1;
	}
	if (launch_check_lib(path, inner, sizeof inner) < 0) {
		/* inner is "PATH: why" */
		snprintf(msg, len, "%s: not a moeft preload library: %s", path,
			 inner + strlen(path) + 2);
		return -1;
	}
	/* Loading runs its constructors: in a child, never in moeft. */
	fflush(NULL);
	if ((pid = fork()) == 0)
		_exit(moeft_api(path));
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		snprintf(msg, len, "%s: cannot check it: %s", path, strerror(errno));
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	snprintf(msg, len, "%s: not a moeft preload library: %s", path,
		 WIFEXITED(status) && WEXITSTATUS(status) >= 1 && WEXITSTATUS(status) <= 3 ?
		 why[WEXITSTATUS(status)] : "loading it crashed");
	return -1;
}

int launch_exec(char **cmd, const char *preload, const char *wal, const char *plan)
{
	const char *old = getenv("LD_PRELOAD");
	char *both = NULL, abs[PATH_MAX];
	int ret;

	/* A relative path stops loading in the first process that runs
	 * in another directory (a server's workers, its compilers). */
	if (realpath(preload, abs))
		preload = abs;
	if (old && *old && asprintf(&both, "%s:%s", preload, old) < 0)
		return -1;
	ret = setenv("LD_PRELOAD", both ? both : preload, 1);
	free(both);
	if (ret < 0 || setenv("MOEFT_WAL", wal, 1) < 0)
		return -1;
	/* Only the preload tells the command to resume, once it has taken
	 * the plan (preload/resume.h): never a stale variable of ours. */
	if (unsetenv("MOEFT_RESTORE_MANIFEST") < 0 ||
	    (plan ? setenv("MOEFT_RESTORE", plan, 1) : unsetenv("MOEFT_RESTORE")) < 0 ||
	    (!plan && setenv("MOEFT_FORCE_FRESH", "1", 1) < 0))
		return -1;
	fflush(NULL);
	execvp(cmd[0], cmd);
	return -1;
}
