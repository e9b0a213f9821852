# The smallest complete Python program: a token into samples and back.
import sotto

samples = sotto.encode(b"hello", profile="default", rate=48000)  # numpy float32
for frame in sotto.decode(samples, 48000):
    print(f"{frame.token.decode()} at {frame.start_time_s:.3f} s, profile {frame.profile}")
