/*
 * A stand-in libnvidia-ml.so.1 for tests: pynvml's real ctypes code loads it through
 * LD_LIBRARY_PATH, so the collector is exercised down to the C boundary without a GPU.
 *
 * Device data comes from the key=value file named by $FAKE_NVML_DATA, re-read on every call
 * so a test can change it mid-run (lose a GPU, fix the driver). Format, one entry a line:
 *
 *   init=0                  NVML return code for nvmlInit* (9 = driver not loaded)
 *   driver=550.54.15
 *   count=2
 *   0.name=NVIDIA H100 80GB HBM3      per device: <index>.<key>=value
 *   0.uuid=GPU-...
 *   0.util=57  0.mem_util=20           percent
 *   0.mem_total=...  0.mem_used=...  0.mem_reserved=...   bytes (used: by contexts, as _v2 says)
 *   0.temp=61                          Celsius
 *   0.power=420000  0.power_limit=700000  0.enforced_limit=650000   milliwatts
 *   0.procs=1234:1073741824,99:-       compute processes, pid:bytes ('-' = not available)
 *   0.gprocs=...                       graphics processes, same syntax
 *   0.error=15                         every call on the device returns this code
 *   0.<group>.error=3                  one group of calls returns this code; groups: handle name
 *                                      uuid util memory temp power power_limit procs gprocs
 *
 * If $FAKE_NVML_LOG is set, each call appends "<function> [<index>]" to that file, so tests can
 * count NVML calls. Build with -DFAKE_NVML_OLD for an older driver: no nvmlDeviceGetMemoryInfo_v2,
 * nvmlDeviceGetTemperatureV or *RunningProcesses_v3.
 *
 * Struct layouts follow nvml.h as mirrored by pynvml (c_nvmlMemory_t, c_nvmlMemory_v2_t,
 * c_nvmlUtilization_t, c_nvmlTemperature_v1_t, c_nvmlProcessInfo_v2_t == _v3_t).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_DEVICES 64
#define MAX_PROCS 256
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL /* NVML_VALUE_NOT_AVAILABLE for unsigned long long */

struct nvmlDevice_st {
    int unused;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

#define NVML_TEMPERATURE_V1 ((unsigned int)(sizeof(nvmlTemperature_v1_t) | (1 << 24)))

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

static struct nvmlDevice_st devices[MAX_DEVICES];
static int init_count; /* NVML is reference counted: every init needs its shutdown */

/* ---- data file ---------------------------------------------------------------------------- */

static char *load_data(void)
{
    const char *path = getenv("FAKE_NVML_DATA");
    if (path == NULL)
        return NULL;
    FILE *fh = fopen(path, "rb");
    if (fh == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + len, 1, cap - len - 1, fh)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(fh);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

/* Copy the value of `key` into out (NUL-terminated, trimmed); 1 if the key is there. */
static int lookup(const char *buf, const char *key, char *out, size_t outlen)
{
    size_t keylen = strlen(key);
    const char *line = buf;
    while (line != NULL && *line != '\0') {
        const char *end = strchr(line, '\n');
        const char *stop = end ? end : line + strlen(line);
        while (line < stop && (*line == ' ' || *line == '\t'))
            line++;
        const char *eq = memchr(line, '=', (size_t)(stop - line));
        if (eq != NULL && *line != '#') {
            const char *kend = eq;
            while (kend > line && (kend[-1] == ' ' || kend[-1] == '\t'))
                kend--;
            if ((size_t)(kend - line) == keylen && memcmp(line, key, keylen) == 0) {
                const char *v = eq + 1;
                const char *vend = stop;
                while (v < vend && (*v == ' ' || *v == '\t'))
                    v++;
                while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t' || vend[-1] == '\r'))
                    vend--;
                size_t n = (size_t)(vend - v);
                if (n >= outlen)
                    n = outlen - 1;
                memcpy(out, v, n);
                out[n] = '\0';
                return 1;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

static long long get_num(const char *buf, const char *key, long long dflt)
{
    char value[64];
    if (!lookup(buf, key, value, sizeof value) || value[0] == '\0')
        return dflt;
    return strtoll(value, NULL, 0);
}

static long long dev_num(const char *buf, int index, const char *field, long long dflt)
{
    char key[96];
    snprintf(key, sizeof key, "%d.%s", index, field);
    return get_num(buf, key, dflt);
}

static int dev_str(const char *buf, int index, const char *field, char *out, size_t outlen)
{
    char key[96];
    snprintf(key, sizeof key, "%d.%s", index, field);
    return lookup(buf, key, out, outlen);
}

static int device_count(const char *buf)
{
    long long n = get_num(buf, "count", 0);
    if (n < 0)
        return 0;
    return n > MAX_DEVICES ? MAX_DEVICES : (int)n;
}

static void log_call(const char *fn, int index)
{
    const char *path = getenv("FAKE_NVML_LOG");
    if (path == NULL)
        return;
    FILE *fh = fopen(path, "a");
    if (fh == NULL)
        return;
    if (index >= 0)
        fprintf(fh, "%s %d\n", fn, index);
    else
        fprintf(fh, "%s\n", fn);
    fclose(fh);
}

/*
 * The common prologue of a device call: load the data, check init, the handle and the
 * configured errors. On success *buf holds the data (caller frees) and *index the device.
 */
static nvmlReturn_t begin(const char *fn, nvmlDevice_t dev, const char *group, char **buf, int *index)
{
    *buf = NULL;
    *index = -1;
    if (dev != NULL && dev >= devices && dev < devices + MAX_DEVICES)
        *index = (int)(dev - devices);
    log_call(fn, *index);
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    *buf = load_data();
    if (*buf == NULL)
        return NVML_ERROR_UNKNOWN;
    if (*index < 0 || *index >= device_count(*buf))
        return NVML_ERROR_INVALID_ARGUMENT;
    long long err = dev_num(*buf, *index, "error", 0);
    if (err != 0)
        return (nvmlReturn_t)err;
    char key[64];
    snprintf(key, sizeof key, "%s.error", group);
    return (nvmlReturn_t)dev_num(*buf, *index, key, 0);
}

static nvmlReturn_t copy_string(const char *value, char *out, unsigned int length)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

/* ---- init and system ---------------------------------------------------------------------- */

static nvmlReturn_t do_init(const char *fn)
{
    log_call(fn, -1);
    char *buf = load_data();
    if (buf == NULL)
        return NVML_ERROR_UNKNOWN;
    nvmlReturn_t ret = (nvmlReturn_t)get_num(buf, "init", 0);
    free(buf);
    if (ret == NVML_SUCCESS)
        init_count++;
    return ret;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init("nvmlInitWithFlags");
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init("nvmlInit_v2");
}

nvmlReturn_t nvmlInit(void)
{
    return do_init("nvmlInit");
}

nvmlReturn_t nvmlShutdown(void)
{
    log_call("nvmlShutdown", -1);
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    log_call("nvmlSystemGetDriverVersion", -1);
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    char *buf = load_data();
    if (buf == NULL)
        return NVML_ERROR_UNKNOWN;
    char value[96] = "550.54.15";
    lookup(buf, "driver", value, sizeof value);
    free(buf);
    return copy_string(value, version, length);
}

static nvmlReturn_t get_count(const char *fn, unsigned int *count)
{
    log_call(fn, -1);
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    char *buf = load_data();
    if (buf == NULL)
        return NVML_ERROR_UNKNOWN;
    *count = (unsigned int)device_count(buf);
    free(buf);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    return get_count("nvmlDeviceGetCount_v2", count);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    return get_count("nvmlDeviceGetCount", count);
}

static nvmlReturn_t handle_by_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    if (device == NULL || index >= MAX_DEVICES) {
        log_call(fn, (int)index);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    char *buf;
    int i;
    nvmlReturn_t ret = begin(fn, &devices[index], "handle", &buf, &i);
    if (ret == NVML_SUCCESS)
        *device = &devices[index];
    free(buf);
    return ret;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index("nvmlDeviceGetHandleByIndex_v2", index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index("nvmlDeviceGetHandleByIndex", index, device);
}

/* ---- device fields ------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetName", device, "name", &buf, &i);
    if (ret == NVML_SUCCESS) {
        char value[256] = "NVIDIA Fake GPU";
        dev_str(buf, i, "name", value, sizeof value);
        ret = copy_string(value, name, length);
    }
    free(buf);
    return ret;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetUUID", device, "uuid", &buf, &i);
    if (ret == NVML_SUCCESS) {
        char value[256];
        if (!dev_str(buf, i, "uuid", value, sizeof value))
            snprintf(value, sizeof value, "GPU-fake-%04d", i);
        ret = copy_string(value, uuid, length);
    }
    free(buf);
    return ret;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetUtilizationRates", device, "util", &buf, &i);
    if (ret == NVML_SUCCESS && utilization == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS) {
        utilization->gpu = (unsigned int)dev_num(buf, i, "util", 0);
        utilization->memory = (unsigned int)dev_num(buf, i, "mem_util", 0);
    }
    free(buf);
    return ret;
}

/* The v1 call counts reserved memory as used (used = total - free), as the real one does. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetMemoryInfo", device, "memory", &buf, &i);
    if (ret == NVML_SUCCESS && memory == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS) {
        unsigned long long total = (unsigned long long)dev_num(buf, i, "mem_total", 0);
        unsigned long long used = (unsigned long long)dev_num(buf, i, "mem_used", 0)
                                  + (unsigned long long)dev_num(buf, i, "mem_reserved", 0);
        memory->total = total;
        memory->used = used;
        memory->free = total > used ? total - used : 0;
    }
    free(buf);
    return ret;
}

#ifndef FAKE_NVML_OLD
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetMemoryInfo_v2", device, "memory", &buf, &i);
    if (ret == NVML_SUCCESS && memory == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS && memory->version != NVML_MEMORY_V2)
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (ret == NVML_SUCCESS) {
        unsigned long long total = (unsigned long long)dev_num(buf, i, "mem_total", 0);
        unsigned long long used = (unsigned long long)dev_num(buf, i, "mem_used", 0);
        unsigned long long reserved = (unsigned long long)dev_num(buf, i, "mem_reserved", 0);
        memory->total = total;
        memory->reserved = reserved;
        memory->used = used;
        memory->free = total > used + reserved ? total - used - reserved : 0;
    }
    free(buf);
    return ret;
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor, unsigned int *temp)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetTemperature", device, "temp", &buf, &i);
    if (ret == NVML_SUCCESS && (temp == NULL || sensor != 0))
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS)
        *temp = (unsigned int)dev_num(buf, i, "temp", 0);
    free(buf);
    return ret;
}

#ifndef FAKE_NVML_OLD
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin("nvmlDeviceGetTemperatureV", device, "temp", &buf, &i);
    if (ret == NVML_SUCCESS && temperature == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS && temperature->version != NVML_TEMPERATURE_V1)
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (ret == NVML_SUCCESS && temperature->sensorType != 0)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS)
        temperature->temperature = (int)dev_num(buf, i, "temp", 0);
    free(buf);
    return ret;
}
#endif

static nvmlReturn_t milliwatts(const char *fn, const char *group, const char *field, nvmlDevice_t device,
                               unsigned int *out)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin(fn, device, group, &buf, &i);
    if (ret == NVML_SUCCESS && out == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS) {
        long long value = dev_num(buf, i, field, -1);
        if (value < 0 && strcmp(field, "enforced_limit") == 0)
            value = dev_num(buf, i, "power_limit", -1);
        if (value < 0)
            ret = NVML_ERROR_NOT_SUPPORTED;
        else
            *out = (unsigned int)value;
    }
    free(buf);
    return ret;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return milliwatts("nvmlDeviceGetPowerUsage", "power", "power", device, power);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return milliwatts("nvmlDeviceGetPowerManagementLimit", "power_limit", "power_limit", device, limit);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return milliwatts("nvmlDeviceGetEnforcedPowerLimit", "power_limit", "enforced_limit", device, limit);
}

/* ---- processes: the two-call protocol ----------------------------------------------------- */

/* Parse "pid:bytes,pid:-,..." into infos; returns how many. */
static unsigned int parse_procs(const char *text, nvmlProcessInfo_t *infos, unsigned int cap)
{
    unsigned int n = 0;
    const char *p = text;
    while (*p != '\0' && n < cap) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        char *end;
        unsigned long pid = strtoul(p, &end, 10);
        if (end == p)
            break;
        p = end;
        unsigned long long used = NOT_AVAILABLE;
        if (*p == ':') {
            p++;
            if (*p == '-')
                p++;
            else {
                used = strtoull(p, &end, 10);
                p = end;
            }
        }
        infos[n].pid = (unsigned int)pid;
        infos[n].usedGpuMemory = used;
        infos[n].gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
        infos[n].computeInstanceId = 0xFFFFFFFFu;
        n++;
        while (*p != '\0' && *p != ',')
            p++;
    }
    return n;
}

static nvmlReturn_t running_processes(const char *fn, const char *group, nvmlDevice_t device,
                                      unsigned int *count, nvmlProcessInfo_t *infos)
{
    char *buf;
    int i;
    nvmlReturn_t ret = begin(fn, device, group, &buf, &i);
    if (ret == NVML_SUCCESS && count == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS) {
        char text[8192];
        nvmlProcessInfo_t found[MAX_PROCS];
        unsigned int n = 0;
        if (dev_str(buf, i, group, text, sizeof text))
            n = parse_procs(text, found, MAX_PROCS);
        if (*count < n) {
            *count = n;
            ret = NVML_ERROR_INSUFFICIENT_SIZE;
        } else if (n > 0 && infos == NULL) {
            ret = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            if (n > 0)
                memcpy(infos, found, n * sizeof *infos);
            *count = n;
        }
    }
    free(buf);
    return ret;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v2", "procs", device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetGraphicsRunningProcesses_v2", "gprocs", device, count, infos);
}

#ifndef FAKE_NVML_OLD
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v3", "procs", device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetGraphicsRunningProcesses_v3", "gprocs", device, count, infos);
}
#endif
