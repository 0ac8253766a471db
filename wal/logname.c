/*
 * logname.c - the names of the logs in a directory of logs (logname.h).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logname.h"
#include "media.h"

void logname_clean(char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
			*s = '_';
}

/* Login name of uid from /etc/passwd, or "" when it is not listed there. */
static void passwd_name(uid_t uid, char *out, size_t len)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f;

	out[0] = '\0';
	if (!(f = fopen("/etc/passwd", "re")))
		return;
	while (getline(&line, &cap, f) > 0) {
		char *name = line, *pw, *id, *end;
		unsigned long v;

		if (!(pw = strchr(name, ':')) || !(id = strchr(pw + 1, ':')))
			continue;
		*pw = '\0';
		v = strtoul(id + 1, &end, 10);
		if (end != id + 1 && *end == ':' && v == uid) {
			snprintf(out, len, "%s", name);
			break;
		}
	}
	free(line);
	fclose(f);
}

void logname_default_dir(char *out, size_t len)
{
	char user[64];
	uid_t uid = geteuid();

	passwd_name(uid, user, sizeof user);
	if (!user[0])
		snprintf(user, sizeof user, "%u", (unsigned)uid);
	logname_clean(user);
	snprintf(out, len, "/dev/shm/moeft-%s", user);
}

int logname_role_of_file(const char *name, char *out, size_t len)
{
	size_t n = strlen(name);
	const char *dot;

	if (n <= 4 || strcmp(name + n - 4, ".wal"))
		return -1;
	n -= 4;
	/* The last '.' of the stem ends the role. */
	for (dot = name + n; dot > name && dot[-1] != '.'; dot--)
		;
	if (dot <= name + 1)
		return -1;
	snprintf(out, len, "%.*s", (int)(dot - 1 - name), name);
	return 0;
}

#define COMM_MAX 15     /* bytes of a process name the kernel keeps */
#define ROLE_MAX 63     /* bytes of a role */

/* name as a role: "." and ".." would name no file of ours, "" none. */
static void as_role(char *name, char *out, size_t len)
{
	if (!name[0] || !strcmp(name, ".") || !strcmp(name, ".."))
		snprintf(out, len, "unknown");
	else {
		logname_clean(name);
		snprintf(out, len, "%s", name);
	}
}

/* The first line of /proc/self/FILE, its first string, into name. */
static void read_self(const char *file, char *name, size_t len)
{
	char path[32];
	FILE *f;

	name[0] = '\0';
	snprintf(path, sizeof path, "/proc/self/%s", file);
	if ((f = fopen(path, "re"))) {
		if (fgets(name, (int)len, f))
			name[strcspn(name, "\n")] = '\0';
		fclose(f);
	}
}

void logname_role(char *out, size_t len)
{
	char name[ROLE_MAX + 1], argv0[ROLE_MAX + 1];
	const char *base;

	read_self("comm", name, sizeof name);
	/* The kernel keeps 15 bytes of a name: where argv[0] (a process
	 * title sets it too) goes on past them, it is the name. */
	if (strlen(name) == COMM_MAX) {
		read_self("cmdline", argv0, sizeof argv0);
		base = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;
		if (!strncmp(base, name, COMM_MAX))
			memmove(name, base, strlen(base) + 1);
	}
	as_role(name, out, len);
}

void logname_role_of(const char *exe, char *out, size_t len)
{
	const char *slash = strrchr(exe, '/');
	char name[ROLE_MAX + 1];

	snprintf(name, sizeof name, "%s", slash ? slash + 1 : exe);
	as_role(name, out, len);
}

int logname_in_dir(char *path, size_t len, const char *device, char *err, size_t errlen)
{
	char role[64], dev[64];
	struct wal_error werr;
	size_t n = strlen(path);
	int fd;

	if ((fd = media_open_dir(path, 1, &werr)) < 0) {
		snprintf(err, errlen, "%s", werr.msg);
		return -1;
	}
	close(fd);
	logname_role(role, sizeof role);
	snprintf(dev, sizeof dev, "%s", device);
	logname_clean(dev);
	/* No '.' in it: the role is what precedes the name's last one. */
	for (char *p = dev; *p; p++)
		if (*p == '.')
			*p = '_';
	if ((size_t)snprintf(path + n, len - n, "/%s.%s.wal", role, dev) >= len - n) {
		path[n] = '\0';
		snprintf(err, errlen, "%s: the log's path in it is longer than %zu bytes", path,
			 len - 1);
		return -1;
	}
	return 0;
}
