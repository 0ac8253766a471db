/*
 * logname.c - this process's log in a MOEFT_WAL directory (logname.h).
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

void logname_role(char *out, size_t len)
{
	char name[64] = "";
	FILE *f;

	if ((f = fopen("/proc/self/comm", "re"))) {
		if (fgets(name, sizeof name, f))
			name[strcspn(name, "\n")] = '\0';
		fclose(f);
	}
	/* "." and ".." would name no file of ours. */
	if (!name[0] || !strcmp(name, ".") || !strcmp(name, ".."))
		snprintf(name, sizeof name, "unknown");
	logname_clean(name);
	snprintf(out, len, "%s", name);
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
