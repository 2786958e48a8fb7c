"""Pictures and sound as the codecs and containers hold them: colour and 4:2:0 planes, swscale, the
codecs' hardware, audio packets, a file's metadata, the quantizer a camera used, and sample footage.
Nothing here knows of pipelines, models or servers."""
