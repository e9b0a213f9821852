# ggwave's decoder (PyPI ggwave 0.4.3: its C++ core, which ggwave.js compiles with Emscripten) on the audio of
# bench.mjs (the 48 kHz fixtures, as Float32), a new instance per fixture, fed in its frames (1024 samples);
# prints the median CPU and wall time of 5 passes. ggwave finds no frame there (another protocol): this is
# the cost of listening.
# Usage: node bench.mjs --dump /tmp/audio && python3 bench-ggwave.py /tmp/audio   (pip install ggwave numpy)
import json, time, sys, ggwave, numpy as np
lengths = json.load(open(sys.argv[1] + '.json'))
audio = np.fromfile(sys.argv[1] + '.f32', dtype=np.float32)
fixtures, at = [], 0
for n in lengths:
    fixtures.append(audio[at:at + n]); at += n
seconds = sum(lengths) / 48000
ggwave.disableLog()
walls, cpus, found = [], [], 0
for run in range(5):
    w, c, found = time.perf_counter(), time.process_time(), 0
    for samples in fixtures:
        params = ggwave.getDefaultParameters()
        params['sampleRateInp'] = 48000
        instance = ggwave.init(params)
        step = params['samplesPerFrame']
        for i in range(0, len(samples) - step + 1, step):
            if ggwave.decode(instance, samples[i:i + step].tobytes()) is not None: found += 1
        ggwave.free(instance)
    walls.append(time.perf_counter() - w); cpus.append(time.process_time() - c)
walls.sort(); cpus.sort()
print(json.dumps({'audioSeconds': round(seconds, 3), 'found': found, 'medianWall': round(walls[2], 3), 'medianCPU': round(cpus[2], 3),
                  'realTimeFactorCPU': round(seconds / cpus[2], 1), 'realTimeFactor': round(seconds / walls[2], 1)}))
