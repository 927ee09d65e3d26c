"""What a checkpoint holds, from tensor names, shapes and statistics: weights health, the
architecture guess, optimizer state, resume state, the radar, bit-flip forensics, and the typed
inspection results. Torch-free; may import `core`."""
