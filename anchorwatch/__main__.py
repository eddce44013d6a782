from anchorwatch.cli import main

main()
