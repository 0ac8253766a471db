/*
 * logname.c - the names of the logs in a directory of logs (logname.h).
 */
#include <ctype.h>
#include <stdio.h>
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

void logname_role(char *out, size_t len)
{
	char name[64] = "";
	FILE *f;

	if ((f = fopen("/proc/self/comm", "re"))) {
		if (fgets(name, sizeof name, f))
			name[strcspn(name, "\n")] = '\0';
		fclose(f);
	}
	as_role(name, out, len);
}

void logname_role_of(const char *exe, char *out, size_t len)
{
	const char *slash = strrchr(exe, '/');
	char name[16];

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
	if ((size_t)snprintf(path + n, len - n, "/%s.%s.wal", role, dev) >= len - n) {
		path[n] = '\0';
		snprintf(err, errlen, "%s: the log's path in it is longer than %zu bytes", path,
			 len - 1);
		return -1;
	}
	return 0;
}
