/* A stand-in for NVML (libnvidia-ml.so.1) for testing the GPU collector on machines without a GPU.
 *
 * Exports the NVML functions the collector reaches through nvml-wrapper, with NVML's C signatures
 * and struct layouts (nvml.h; nvml-wrapper-sys 0.10's bindings). Every reading comes from the text
 * file named by TRAINLOG_NVML_STANDIN, read again on every call, so a test can change the readings
 * while a process samples. README.md describes the file.
 *
 * Build: cc -shared -fPIC -O2 -o <dir>/libnvidia-ml.so.1 tests/nvml-standin/nvml_standin.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned int nvmlReturn_t;
typedef struct standin_device *nvmlDevice_t;
typedef struct standin_gpm_sample *nvmlGpmSample_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

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

/* NVML_STRUCT_VERSION(Memory, 2) */
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

#define NVML_GPM_METRIC_SM_UTIL 2
#define NVML_GPM_METRIC_SM_OCCUPANCY 3
#define NVML_GPM_METRIC_ANY_TENSOR_UTIL 5
#define NVML_GPM_METRIC_MAX 210
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

#define MAX_DEVICES 64

struct standin_device {
    unsigned int index;
};

static struct standin_device devices[MAX_DEVICES];

/* What a GPM sample holds: the device, the order it was taken in, and the percentages the file
 * gave at that moment. nvmlGpmMetricsGet answers the later sample's percentages. */
struct standin_gpm_sample {
    int taken;
    unsigned int device;
    unsigned long long order;
    double sm_active;
    double sm_occupancy;
    double tensor_active;
};

static int init_count;
static unsigned long long samples_taken;

/* ---- the readings file ---- */

/* The file's text (NULL when TRAINLOG_NVML_STANDIN is unset or the file cannot be read). */
static char *read_config(void) {
    const char *path = getenv("TRAINLOG_NVML_STANDIN");
    if (path == NULL || *path == '\0') return NULL;
    FILE *file = fopen(path, "r");
    if (file == NULL) return NULL;
    size_t capacity = 4096, length = 0;
    char *text = malloc(capacity);
    while (text != NULL) {
        size_t got = fread(text + length, 1, capacity - length - 1, file);
        length += got;
        if (got == 0) break;
        if (length + 1 == capacity) {
            capacity *= 2;
            char *bigger = realloc(text, capacity);
            if (bigger == NULL) {
                free(text);
                text = NULL;
            } else {
                text = bigger;
            }
        }
    }
    fclose(file);
    if (text != NULL) text[length] = '\0';
    return text;
}

/* Copies the value of the last `key=value` line for `key` into `out`; 0 when absent. Spaces
 * around the key and the value are ignored; lines starting with '#' are comments. */
static int lookup(const char *key, char *out, size_t out_size) {
    char *text = read_config();
    if (text == NULL) return 0;
    int found = 0;
    size_t key_length = strlen(key);
    for (char *line = text; line != NULL && *line != '\0';) {
        char *next = strchr(line, '\n');
        if (next != NULL) *next++ = '\0';
        while (*line == ' ' || *line == '\t') line++;
        char *equals = strchr(line, '=');
        if (*line != '#' && equals != NULL) {
            char *key_end = equals;
            while (key_end > line && (key_end[-1] == ' ' || key_end[-1] == '\t')) key_end--;
            if ((size_t)(key_end - line) == key_length && strncmp(line, key, key_length) == 0) {
                char *value = equals + 1;
                while (*value == ' ' || *value == '\t') value++;
                size_t value_length = strlen(value);
                while (value_length > 0 && strchr(" \t\r", value[value_length - 1]) != NULL) value_length--;
                if (value_length >= out_size) value_length = out_size - 1;
                memcpy(out, value, value_length);
                out[value_length] = '\0';
                found = 1;
            }
        }
        line = next;
    }
    free(text);
    return found;
}

static int lookup_device(unsigned int index, const char *name, char *out, size_t out_size) {
    char key[128];
    snprintf(key, sizeof key, "gpu.%u.%s", index, name);
    return lookup(key, out, out_size);
}

static int lookup_number(unsigned int index, const char *name, double *value) {
    char text[64];
    if (!lookup_device(index, name, text, sizeof text)) return 0;
    char *end;
    *value = strtod(text, &end);
    return end != text;
}

static unsigned int device_count(void) {
    char text[32];
    if (!lookup("count", text, sizeof text)) return 0;
    unsigned long count = strtoul(text, NULL, 10);
    return count > MAX_DEVICES ? MAX_DEVICES : (unsigned int)count;
}

static int gpm_supported(unsigned int index) {
    char text[16];
    return lookup_device(index, "gpm", text, sizeof text) && (strcmp(text, "yes") == 0 || strcmp(text, "1") == 0);
}

/* Checks that NVML was initialized and `device` is one of this library's handles. */
static nvmlReturn_t check_device(nvmlDevice_t device) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || device < devices || device >= devices + MAX_DEVICES) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length) {
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

/* A numeric reading of a device: NOT_SUPPORTED when the file does not give it. */
static nvmlReturn_t device_number(nvmlDevice_t device, const char *name, double *value) {
    nvmlReturn_t status = check_device(device);
    if (status != NVML_SUCCESS) return status;
    if (value == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return lookup_number(device->index, name, value) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* ---- library ---- */

nvmlReturn_t nvmlInit_v2(void) {
    char *text = read_config();
    if (text == NULL) return NVML_ERROR_DRIVER_NOT_LOADED;
    free(text);
    for (unsigned int i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    char text[80] = "550.54.15";
    lookup("driver_version", text, sizeof text);
    return copy_text(text, version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    return copy_text("12.550.54.15", version, length);
}

/* CUDA's version as NVML gives it: major * 1000 + minor * 10 (12.4 -> 12040). */
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    char text[32] = "12.4";
    lookup("cuda_version", text, sizeof text);
    int major = 0, minor = 0;
    sscanf(text, "%d.%d", &major, &minor);
    *version = major * 1000 + minor * 10;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* ---- device readings ---- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t status = check_device(device);
    if (status != NVML_SUCCESS) return status;
    char text[96];
    if (!lookup_device(device->index, "name", text, sizeof text)) snprintf(text, sizeof text, "NVIDIA stand-in GPU %u", device->index);
    return copy_text(text, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t status = check_device(device);
    if (status != NVML_SUCCESS) return status;
    char text[96];
    if (!lookup_device(device->index, "uuid", text, sizeof text)) {
        snprintf(text, sizeof text, "GPU-00000000-0000-0000-0000-%012u", device->index);
    }
    return copy_text(text, uuid, length);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    double gpu, memory = 0;
    nvmlReturn_t status = device_number(device, "util", &gpu);
    if (status != NVML_SUCCESS) return status;
    if (utilization == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    lookup_number(device->index, "mem_util", &memory);
    utilization->gpu = (unsigned int)gpu;
    utilization->memory = (unsigned int)memory;
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_reading(nvmlDevice_t device, unsigned long long *total, unsigned long long *used) {
    double total_bytes, used_bytes;
    nvmlReturn_t status = device_number(device, "mem_total_bytes", &total_bytes);
    if (status != NVML_SUCCESS) return status;
    if (!lookup_number(device->index, "mem_used_bytes", &used_bytes)) used_bytes = 0;
    *total = (unsigned long long)total_bytes;
    *used = (unsigned long long)used_bytes;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t status = memory_reading(device, &memory->total, &memory->used);
    if (status == NVML_SUCCESS) memory->free = memory->total - memory->used;
    return status;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t status = memory_reading(device, &memory->total, &memory->used);
    if (status == NVML_SUCCESS) {
        memory->reserved = 0;
        memory->free = memory->total - memory->used;
    }
    return status;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts) {
    double value;
    nvmlReturn_t status = device_number(device, "power_mw", &value);
    if (status != NVML_SUCCESS) return status;
    if (milliwatts == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = (unsigned int)value;
    return NVML_SUCCESS;
}

/* Only the GPU core sensor (NVML_TEMPERATURE_GPU = 0) exists. */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor, unsigned int *celsius) {
    double value;
    nvmlReturn_t status = device_number(device, "temp_c", &value);
    if (status != NVML_SUCCESS) return status;
    if (sensor != 0 || celsius == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *celsius = (unsigned int)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *millijoules) {
    double value;
    nvmlReturn_t status = device_number(device, "energy_mj", &value);
    if (status != NVML_SUCCESS) return status;
    if (millijoules == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *millijoules = (unsigned long long)value;
    return NVML_SUCCESS;
}

/* No stand-in GPU is in MIG mode. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    nvmlReturn_t status = check_device(device);
    return status != NVML_SUCCESS ? status : (count == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    (void)index;
    (void)mig;
    nvmlReturn_t status = check_device(device);
    return status != NVML_SUCCESS ? status : NVML_ERROR_NOT_SUPPORTED;
}

/* ---- GPM ---- */

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    nvmlReturn_t status = check_device(device);
    if (status != NVML_SUCCESS) return status;
    if (support == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = (unsigned int)gpm_supported(device->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    return *sample == NULL ? NVML_ERROR_MEMORY : NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    nvmlReturn_t status = check_device(device);
    if (status != NVML_SUCCESS) return status;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpm_supported(device->index)) return NVML_ERROR_NOT_SUPPORTED;
    sample->taken = 1;
    sample->device = device->index;
    sample->order = __atomic_add_fetch(&samples_taken, 1, __ATOMIC_SEQ_CST);
    sample->sm_active = sample->sm_occupancy = sample->tensor_active = 0;
    lookup_number(device->index, "sm_active", &sample->sm_active);
    lookup_number(device->index, "sm_occupancy", &sample->sm_occupancy);
    lookup_number(device->index, "tensor_active", &sample->tensor_active);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance, nvmlGpmSample_t sample) {
    (void)gpu_instance;
    (void)sample;
    nvmlReturn_t status = check_device(device);
    return status != NVML_SUCCESS ? status : NVML_ERROR_NOT_SUPPORTED;
}

/* Answers the later sample's percentages; refuses samples never taken, of two devices, or in the
 * wrong order (sample1 must be the earlier), as NVML does. */
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (request == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const struct standin_gpm_sample *earlier = request->sample1, *later = request->sample2;
    if (earlier == NULL || later == NULL || !earlier->taken || !later->taken) return NVML_ERROR_INVALID_ARGUMENT;
    if (earlier->device != later->device || earlier->order >= later->order) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->numMetrics > NVML_GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &request->metrics[i];
        metric->nvmlReturn = NVML_SUCCESS;
        metric->metricInfo.unit = "%";
        switch (metric->metricId) {
        case NVML_GPM_METRIC_SM_UTIL:
            metric->value = later->sm_active;
            metric->metricInfo.shortName = "sm_util";
            metric->metricInfo.longName = "SM utilization";
            break;
        case NVML_GPM_METRIC_SM_OCCUPANCY:
            metric->value = later->sm_occupancy;
            metric->metricInfo.shortName = "sm_occupancy";
            metric->metricInfo.longName = "SM occupancy";
            break;
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL:
            metric->value = later->tensor_active;
            metric->metricInfo.shortName = "any_tensor_util";
            metric->metricInfo.longName = "Any tensor utilization";
            break;
        default:
            metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            metric->value = 0;
            metric->metricInfo.shortName = metric->metricInfo.longName = metric->metricInfo.unit = NULL;
        }
    }
    return NVML_SUCCESS;
}
