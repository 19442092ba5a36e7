# mini — CPU benchmarks
:set d=256 H=4 L=4 E=4 k=2 r=64 f=1024
:set engram_rows=25000 engram_dim=32 engram_orders=2,3,4 engram_ram=off
:set seq=256 batch=8
